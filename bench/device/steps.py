"""The GPU box's measurements, one step at a time, into one results JSON per call.

`python -m bench.device.steps --call N --manifest M --json PATH [--deadline EPOCH]` runs the steps the
manifest gives call N, each in a child process (`--only STEP`) under what is left of the call's time, and
writes the JSON after every step, so a call cut short keeps what finished. The figures keep the names of
bench/suites/gpu.py, startup.py and fixed_cost.py, so runs compare; the flagship comparison adds group
`gbm_gpu vs CPU · <data>`. Without a CUDA device every figure is written as not measured, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.device.plan import BY_NAME

SUITE_OF = {"startup": "startup", "tracked": "fixed_cost"}  # the rest go to suite "gpu"
FLAGSHIP_TARGETS = {"Adult": 0.95, "synthetic 1M": 1.0, "largest": 3.0}
# Adult as configured; the synthetic tables with at most 200 rounds on both sides (early stopping kept),
# so that 4M rows on the CPUs fit the plan's minutes
ROUNDS_200 = ["model.lightgbm.params.num_iterations=200", "model.xgboost.params.num_boost_round=200"]
FLAGSHIP_SIZES = {
    "Adult": ([], 3),
    "synthetic 1M": (["data=synthetic", "data.rows=1000000", "data.features=50", *ROUNDS_200], 1),
}
LARGEST_ROWS = int(os.environ.get("KIT_LARGEST_ROWS", "4000000"))
DRY_RUN_TARGET = ("<=", 1.2)
TRACKED = "model=gbm_gpu"  # of fixed_cost's GPU_RUNS: the flagship; model=nn_gpu's overhead was met (1.05x)
FLAGSHIP_GPU = ["+hardware=1gpu", "model=gbm_gpu"]
FLAGSHIP_CPU = ["model=gbm"]
FLAGSHIP_FIGURES = (
    "gbm_gpu seconds (+hardware=1gpu model=gbm_gpu)",
    "gbm seconds (model=gbm, the CPUs)",
    "speed-up whole process",
)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def device_name() -> str | None:
    from bench.common import cuda_device_name

    return cuda_device_name()


def _opts(scratch: Path, quick: bool):
    from bench.common import DEFAULT_BIO_TRAIN, Options

    return Options(
        quick=quick,
        repeats=None,
        scratch=scratch,
        bio_train=DEFAULT_BIO_TRAIN,
        autogluon_python=Path("/nonexistent"),
    )


def _planned(step: str) -> list[tuple[str, str, str]]:
    """(group, name, unit) of a step's figures, for the not-measured case."""
    from bench.suites import gpu

    if step == "pytest":
        return [("pytest", "pytest -m gpu", ""), ("pytest", OPENCL_TESTS, "")]
    if step == "flagship":
        names = list(FLAGSHIP_SIZES) + [_largest_name()]
        return [
            (f"gbm_gpu vs CPU · {n}", f, "x" if "speed-up" in f else "s")
            for n in names
            for f in FLAGSHIP_FIGURES
        ]
    if step == "network":
        return list(gpu.NN_FIGURES)
    if step == "lightgbm":
        return [("LightGBM · synthetic 1M", f, "x" if "speed-up" in f else "s") for f in gpu.LGB_FIGURES] + [
            ("LightGBM CUDA build · synthetic 1M", f, "x" if "speed-up" in f else "s") for f in CUDA_FIGURES
        ]
    if step == "xgboost":
        return [("XGBoost · synthetic 1M", f, "x" if "speed-up" in f else "s") for f in gpu.XGB_FIGURES]
    if step == "packing":
        return [(gpu.PACK_GROUP, f, "x" if "speed-up" in f else "s") for f in gpu.PACK_FIGURES] + [
            (gpu.PACK_GROUP, "packed by the planner", "")
        ]
    if step == "startup":
        return [("startup", "python -m pipeline +hardware=4gpu model=all dry_run=true tracking=none", "s")]
    if step == "tracked":
        return [(f"whole process · Adult · {TRACKED} · +hardware=1gpu", "tracked / untracked", "ratio")]
    raise KeyError(step)


CUDA_FIGURES = ("CPU seconds", "CUDA seconds", "speed-up CPU/CUDA (wall)", "speed-up CPU/CUDA (model.fit)")


def _largest_name() -> str:
    from bench.suites.gpu import _rows

    return f"synthetic {_rows(LARGEST_ROWS)}"


def not_measured_all(step: str, reason: str) -> list[dict]:
    from bench.common import not_measured

    return [not_measured(name, reason, group=group, unit=unit) for group, name, unit in _planned(step)]


# ---------------------------------------------------------------------------------------------- steps

OPENCL_TESTS = "pytest -m gpu · LightGBM's PyPI build (OpenCL learner)"


def step_pytest(opts, device) -> list[dict]:
    """The gpu tests with LightGBM's CUDA build; then its OpenCL tests again with the PyPI build first."""
    from bench.suites import gpu

    out = [gpu._pytest_gpu(device, opts.scratch / "pytest-gpu.log")]
    site = os.environ.get("KIT_SITE_OPENCL")
    if site:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, os.environ.get("PYTHONPATH", "")])}
        out.append(
            gpu._pytest_gpu(
                device,
                opts.scratch / "pytest-gpu-opencl.log",
                ["-k", "opencl or repeatable"],
                env,
                OPENCL_TESTS,
            )
        )
    return out


def _runner(runner_class, cwd: Path):
    """The fixed-cost suite's Runner in `cwd`, with a private runtime folder of its own for tracker
    services and wide console lines."""
    runtime = cwd / "xdg_runtime"
    runtime.mkdir(parents=True, mode=0o700, exist_ok=True)
    return runner_class(cwd, {**os.environ, "COLUMNS": "200", "XDG_RUNTIME_DIR": str(runtime)})


def step_flagship(opts, device) -> list[dict]:
    """Whole processes, as a user runs them: +hardware=1gpu model=gbm_gpu against model=gbm on the CPUs."""
    from bench.common import figure, guarded, ratios
    from bench.suites.fixed_cost import Runner, _alternate, _best_auc

    runner = _runner(Runner, opts.scratch / "flagship")
    common = ["tracking=none", "hpo=none"]
    sizes = dict(FLAGSHIP_SIZES)
    sizes[_largest_name()] = (
        ["data=synthetic", f"data.rows={LARGEST_ROWS}", "data.features=50", *ROUNDS_200],
        1,
    )
    targets = {**FLAGSHIP_TARGETS, _largest_name(): FLAGSHIP_TARGETS["largest"]}
    figures = []
    for name, (data, n) in sizes.items():
        group = f"gbm_gpu vs CPU · {name}"
        variants = {"gbm_gpu": [*FLAGSHIP_GPU, *common, *data], "gbm": [*FLAGSHIP_CPU, *common, *data]}

        def measure(group=group, variants=variants, n=n, name=name):
            if name == "Adult":
                runner.engine(variants["gbm_gpu"])  # CUDA kernels and the file cache warmed; not timed
            wall, auc, first = _alternate(runner, variants, n, group, _best_auc)
            return [
                figure(FLAGSHIP_FIGURES[0], wall["gbm_gpu"], "s", group=group, device=device),
                figure(FLAGSHIP_FIGURES[1], wall["gbm"], "s", group=group),
                figure(
                    FLAGSHIP_FIGURES[2],
                    ratios(wall["gbm"], wall["gbm_gpu"]),
                    "x",
                    group=group,
                    target=(">=", targets[name]),
                    device=device,
                    devices_chosen=_devices_chosen(first["gbm_gpu"]),
                ),
                figure("gbm_gpu best test ROC AUC", auc["gbm_gpu"], "roc_auc", group=group, kind="score"),
                figure("gbm best test ROC AUC", auc["gbm"], "roc_auc", group=group, kind="score"),
            ]

        figures += guarded(group, FLAGSHIP_FIGURES, measure)
    return figures


def _devices_chosen(run_dir: Path) -> dict:
    """Each model's device as the planner chose it (plan.json of the run), for the note beside a ratio."""
    try:
        plan = json.loads((run_dir / "plan.json").read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for item in plan.get("models", plan if isinstance(plan, list) else []):
        if isinstance(item, dict) and "name" in item:
            out[item["name"]] = f"{item.get('device')} ({item.get('device_reason', '')})"
    return out


def step_network(opts, device) -> list[dict]:
    from bench.suites import nn_loop

    measured, _ = nn_loop.measure(opts, "cuda", "network on CUDA", device)
    return measured or not_measured_all("network", "no figures")


def step_lightgbm(opts, device) -> list[dict]:
    """The CUDA build's CPU learner vs its CUDA learner here; the PyPI build's OpenCL learner in a child
    process with that build first on the path (KIT_SITE_OPENCL)."""
    from bench.common import Engine, guarded, load_data
    from bench.suites import gpu

    s = gpu.FULL
    ov = ["data=synthetic", "data.rows=1000000"]
    engine = Engine(opts.scratch)
    data = load_data(ov, opts.scratch / "engine")[0]
    common = ov + [
        "model=lightgbm",
        "tracking=none",
        "hpo=none",
        "parallelism=default",
        f"model.lightgbm.params.num_iterations={s['rounds']}",
        "model.lightgbm.params.early_stopping_round=0",
        "++model.lightgbm.params.max_bin=63",
    ]
    cuda_ov = common + ["++model.lightgbm.params.device_type=cuda", "model.lightgbm.resources.num_gpus=1"]
    group = "LightGBM CUDA build · synthetic 1M"
    figures = guarded(
        group,
        CUDA_FIGURES,
        lambda: gpu._compare(engine, data, "lightgbm", group, 2, device, ("CPU", common), ("CUDA", cuda_ov)),
    )
    site = os.environ.get("KIT_SITE_OPENCL")
    if site:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, os.environ.get("PYTHONPATH", "")])}
        out = opts.scratch / "opencl.json"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.device.steps",
                "--only",
                "lightgbm-opencl",
                "--json",
                str(out),
                "--scratch",
                str(opts.scratch / "opencl"),
                "--device",
                device,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode == 0 and out.exists():
            figures += json.loads(out.read_text())
        else:
            figures += not_measured_all("lightgbm", f"OpenCL child failed: {proc.stderr[-400:]}")[:4]
    else:
        figures += not_measured_all("lightgbm", "the kit installed no PyPI LightGBM (KIT_SITE_OPENCL unset)")[
            :4
        ]
    return figures


def step_lightgbm_opencl(opts, device) -> list[dict]:
    from bench.common import Engine, load_data
    from bench.suites import gpu

    engine = Engine(opts.scratch)
    ov = ["data=synthetic", "data.rows=1000000"]
    data = load_data(ov, opts.scratch / "engine")[0]
    return gpu._lightgbm(
        engine,
        ov,
        "synthetic 1M",
        gpu.FULL["rounds"],
        2,
        device,
        opts,
        lambda _: data,
        gpu._lightgbm_gpu_probe(),
    )


def step_xgboost(opts, device) -> list[dict]:
    from bench.common import Engine, load_data
    from bench.suites import gpu

    engine = Engine(opts.scratch)
    ov = ["data=synthetic", "data.rows=1000000"]
    data = load_data(ov, opts.scratch / "engine")[0]
    return gpu._xgboost(engine, ov, "synthetic 1M", gpu.FULL["rounds"], 2, device, opts, lambda _: data)


PLANNER_PACKS = [
    "+hardware=1gpu",
    "model=nn_gpu",
    "parallelism.num_folds=2",
    "model.nn.resources.num_gpus=null",
    "dry_run=true",
    "tracking=none",
]


def step_packing(opts, device) -> list[dict]:
    """Packed vs one after the other with the shares set; then whether the planner, left to derive them,
    packs two network folds on one GPU (1) or gives each a whole device (0), from the dry run's plan."""
    from bench.common import Engine, guarded
    from bench.suites import gpu

    figures = gpu._packing(Engine(opts.scratch), opts, gpu.FULL, 2, device)
    return figures + guarded(
        gpu.PACK_GROUP, ["packed by the planner"], lambda: [_planner_packs(opts, device)]
    )


def _planner_packs(opts, device) -> dict:
    from bench.common import figure
    from bench.suites import gpu

    cwd = opts.scratch / "planner"
    cwd.mkdir(parents=True, exist_ok=True)
    run_dir = cwd / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", *PLANNER_PACKS, f"hydra.run.dir={run_dir}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the dry run exited {proc.returncode}: {proc.stderr[-400:]}")
    (model,) = json.loads((run_dir / "plan.json").read_text())["models"]
    packed = float(model["fit"]["num_gpus"] < 1 and model["folds_parallel"] > 1)
    return figure(
        "packed by the planner",
        [packed],
        "",
        group=gpu.PACK_GROUP,
        device=device,
        fit=model["fit"],
        folds_parallel=model["folds_parallel"],
        reason=model.get("gpu_packing_reason"),
        command="python -m pipeline " + " ".join(PLANNER_PACKS),
    )


def step_startup(opts, device) -> list[dict]:
    from bench.suites import startup

    opts.repeats = 5
    figures = startup.run(opts)["figures"]
    for f in figures:
        if "dry_run=true" in f["name"] and "median" in f:
            op, value = DRY_RUN_TARGET
            f["target"] = {"op": op, "value": value}
            f["meets_target"] = f["median"] <= value
            f["device"] = device
    return figures


def step_tracked(opts, device) -> list[dict]:
    from bench.common import guarded
    from bench.suites.fixed_cost import GPU_RUNS, Runner, _gpu_overhead, _stop_services

    runner = _runner(Runner, opts.scratch / "tracked")
    figures = []
    try:
        figures += guarded(
            f"whole process · Adult · {TRACKED}",
            ["tracked / untracked"],
            lambda: _gpu_overhead(runner, TRACKED, GPU_RUNS[TRACKED], [], 2),
        )
    finally:
        _stop_services(runner)
    return figures


STEP_FUNCTIONS = {
    "pytest": step_pytest,
    "flagship": step_flagship,
    "network": step_network,
    "lightgbm": step_lightgbm,
    "lightgbm-opencl": step_lightgbm_opencl,
    "xgboost": step_xgboost,
    "packing": step_packing,
    "startup": step_startup,
    "tracked": step_tracked,
}


def run_only(step: str, out: Path, scratch: Path, device: str | None) -> int:
    """One step in this process: its figures as a JSON list in `out`."""
    from bench.common import log, no_cuda_reason

    if step == "lightgbm-opencl":
        figures = STEP_FUNCTIONS[step](_opts(scratch, False), device) if device else []
    elif device is None:
        figures = not_measured_all(step, no_cuda_reason())
    else:
        log(f"step {step}")
        figures = STEP_FUNCTIONS[step](_opts(scratch, False), device)
    out.write_text(json.dumps(figures, default=str))
    return 0


# ---------------------------------------------------------------------------------------------- calls


def new_result(manifest: dict, call: int, device: str | None) -> dict:
    from bench import common

    return {
        "schema": 1,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "mode": "full",
        "command": f"bash bench/device/run.sh {call}",
        "kit": {"commit": manifest.get("commit"), "call": call, "calls": len(manifest["calls"])},
        "machine": common.machine(),
        "device": {"name": device or common.cpu_model(), "kind": "cuda" if device else "cpu"},
        "versions": common.versions(),
        "suites": {},
    }


def add(result: dict, step: str, figures: list[dict], seconds: float, status: str = "ok", **extra) -> None:
    suite = result["suites"].setdefault(
        SUITE_OF.get(step, "gpu"), {"status": "ok", "settings": {}, "figures": [], "notes": [], "seconds": 0}
    )
    suite["figures"] += figures
    suite["seconds"] = round(suite["seconds"] + seconds, 1)
    suite["settings"].setdefault("steps", {})[step] = {
        "status": status,
        "seconds": round(seconds, 1),
        **extra,
    }
    if status != "ok":
        suite["notes"].append(f"step {step}: {status}")


def write(path: Path, result: dict) -> None:
    result["total_seconds"] = round(sum(s["seconds"] for s in result["suites"].values()), 1)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
    tmp.replace(path)


def run_call(manifest: dict, call: int, out_dir: Path, deadline: float, scratch: Path) -> Path:
    """The call's steps in order; returns the results JSON, named by time, device and call."""
    from bench.common import log

    device = device_name()
    result = new_result(manifest, call, device)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    json_path = out_dir / f"{stamp}-gpu-{slug(device or 'no-cuda')}-c{call}.json"
    steps = next(c for c in manifest["calls"] if c["call"] == call)["steps"]
    write(json_path, result)
    for step in steps:
        left = deadline - time.time()
        estimate = BY_NAME[step].seconds
        if left < min(30, estimate):
            add(
                result,
                step,
                not_measured_all(
                    step, f"not started: {left:.0f} s left of the call, the step takes ~{estimate} s"
                ),
                0,
                "skipped",
            )
            write(json_path, result)
            continue
        log(f"call {call}: step {step} (~{estimate} s; {left:.0f} s left)")
        out = scratch / f"{step}.json"
        t0 = time.perf_counter()
        cmd = [
            sys.executable,
            "-m",
            "bench.device.steps",
            "--only",
            step,
            "--json",
            str(out),
            "--scratch",
            str(scratch / step),
            "--device",
            device or "",
        ]
        try:
            proc = subprocess.run(cmd, timeout=max(1.0, left), stdout=sys.stdout, stderr=sys.stderr)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
        seconds = time.perf_counter() - t0
        if code == 0 and out.exists():
            add(result, step, json.loads(out.read_text()), seconds)
        else:
            why = "cut at the call's time limit" if code is None else f"exited {code}"
            add(result, step, not_measured_all(step, f"failed: {why}"), seconds, "failed")
        write(json_path, result)
    log(f"call {call}: wrote {json_path}")
    return json_path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.device.steps", description=__doc__.split("\n\n")[0])
    p.add_argument("--call", type=int)
    p.add_argument("--manifest", type=Path)
    p.add_argument("--json", type=Path, help="--only: where the step's figures go")
    p.add_argument("--out-dir", type=Path, help="--call: the folder of the call's results JSON")
    p.add_argument("--device", default=None, help="--only: the CUDA device's name, empty for none")
    p.add_argument("--deadline", type=float, default=None, help="epoch seconds by which the call must end")
    p.add_argument("--only", default=None, help="one step in this process (what --call runs per step)")
    p.add_argument("--scratch", type=Path, default=None)
    args = p.parse_args(argv)
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="kit-"))
    scratch.mkdir(parents=True, exist_ok=True)
    if args.only:
        device = device_name() if args.device is None else (args.device or None)
        return run_only(args.only, args.json, scratch, device)
    manifest = json.loads(args.manifest.read_text())
    deadline = args.deadline or time.time() + 480
    args.out_dir.mkdir(parents=True, exist_ok=True)
    run_call(manifest, args.call, args.out_dir, deadline, scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
