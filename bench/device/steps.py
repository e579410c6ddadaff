"""The GPU box's measurements, one step at a time.

`python -m bench.device.steps --only STEP --json PATH` runs one step in this process (what
`bench.device.calls` starts for each step of a call, under what is left of the call's time) and appends
each group's figures to PATH as soon as they are measured, one JSON line each, so that a step cut at the
call's deadline keeps the groups it finished. The figures keep the names of bench/suites/gpu.py,
startup.py and fixed_cost.py, so runs compare; the flagship comparison adds group
`gbm_gpu vs CPU · <data>`. Without a CUDA device every figure is written as not measured, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

from bench.device.results import Lines, read_lines

SUITE_OF = {"startup": "startup", "tracked": "fixed_cost"}  # the rest go to suite "gpu"
FLAGSHIP_TARGETS = {"Adult": 0.95, "synthetic 1M": 1.0, "largest": 3.0}
# Adult as configured; the synthetic tables with at most 200 rounds on both sides (early stopping kept),
# so that 4M rows on the CPUs fit the plan's minutes
ROUNDS_200 = ["model.lightgbm.params.num_iterations=200", "model.xgboost.params.num_boost_round=200"]
FLAGSHIP_SIZES = {
    "Adult": ([], 2),
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
    if step == "network-batches":
        from bench.suites import nn_loop

        names = [n for b in nn_loop.SWEEP_BATCHES
                 for n in (f"engine loop rows/s · batch {b}", f"milliseconds per step · batch {b}")]
        batch = nn_loop.settings_for("cuda", False)["batch_size"]
        names += [f"CUDA kernels per step · batch {batch}", f"GPU busy share of the loop · batch {batch}"]
        units = {"milli": "ms", "rows": "rows/s"}
        return [(NETWORK_BATCHES_GROUP, n, next((u for k, u in units.items() if k in n), "")) for n in names]
    if step == "lightgbm-largest":
        return [(_lightgbm_largest_group(), f, "x" if "speed-up" in f else "s") for f in CUDA_FIGURES]
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


def not_measured_all(step: str, reason: str, have=(), group: str | None = None) -> list[dict]:
    """The step's planned figures (those of `group` only, if given) missing from `have`, as not measured."""
    from bench.common import not_measured

    present = {(f.get("group"), f.get("name")) for f in have}
    return [
        not_measured(name, reason, group=g, unit=unit)
        for g, name, unit in _planned(step)
        if (g, name) not in present and group in (None, g)
    ]


# ---------------------------------------------------------------------------------------------- steps
# Each step hands each group's figures to `out` as soon as they are measured.

OPENCL_TESTS = "pytest -m gpu · LightGBM's PyPI build (OpenCL learner)"


def _opencl_env() -> dict | None:
    """The environment with LightGBM's PyPI build (its OpenCL learner) first on the path, or None."""
    site = os.environ.get("KIT_SITE_OPENCL")
    if not site:
        return None
    return {**os.environ, "PYTHONPATH": os.pathsep.join([site, os.environ.get("PYTHONPATH", "")])}


def step_pytest(opts, device, out: Lines) -> None:
    """The gpu tests with LightGBM's CUDA build; then its OpenCL tests again with the PyPI build first."""
    from bench.suites import gpu

    out.figures([gpu._pytest_gpu(device, opts.scratch / "pytest-gpu.log")])
    env = _opencl_env()
    if env:
        log_path = opts.scratch / "pytest-gpu-opencl.log"
        out.figures([gpu._pytest_gpu(device, log_path, ["-k", "opencl or repeatable"], env, OPENCL_TESTS)])


def _runner(runner_class, cwd: Path):
    """The fixed-cost suite's Runner in `cwd`, with a private runtime folder of its own for tracker
    services and wide console lines."""
    runtime = cwd / "xdg_runtime"
    runtime.mkdir(parents=True, mode=0o700, exist_ok=True)
    return runner_class(cwd, {**os.environ, "COLUMNS": "200", "XDG_RUNTIME_DIR": str(runtime)})


def step_flagship(opts, device, out: Lines) -> None:
    """Whole processes, as a user runs them: +hardware=1gpu model=gbm_gpu against model=gbm on the CPUs;
    each data set's figures as soon as both sides ran."""
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

        out.figures(guarded(group, FLAGSHIP_FIGURES, measure))


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


def step_network(opts, device, out: Lines) -> None:
    """Each precision's figures, then compile=reduce-overhead's, as each is measured."""
    from bench.suites import nn_loop

    _, settings = nn_loop.measure(opts, "cuda", "network on CUDA", device, emit=out.figures)
    out.settings(network=settings)


SYNTHETIC_1M = ["data=synthetic", "data.rows=1000000"]


def step_lightgbm(opts, device, out: Lines) -> None:
    """The CUDA build's CPU learner vs its CUDA learner here; the PyPI build's OpenCL learner in a child
    process with that build first on the path (KIT_SITE_OPENCL)."""
    out.figures(_cuda_build_vs_cpu(opts, device, SYNTHETIC_1M, "LightGBM CUDA build · synthetic 1M", 2))
    opencl = "LightGBM · synthetic 1M"
    env = _opencl_env()
    if env is None:
        why = "the kit installed no PyPI LightGBM (KIT_SITE_OPENCL unset)"
        out.figures(not_measured_all("lightgbm", why, group=opencl))
        return
    lines = opts.scratch / "opencl.jsonl"
    lines.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "bench.device.steps", "--only", "lightgbm-opencl", "--json", str(lines),
           "--scratch", str(opts.scratch / "opencl"), "--device", device]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    figures, _, error = read_lines(lines)
    if proc.returncode != 0:
        why = f"OpenCL child failed: {error or proc.stderr[-400:]}"
        figures += not_measured_all("lightgbm", why, figures, group=opencl)
    out.figures(figures)


def step_lightgbm_opencl(opts, device, out: Lines) -> None:
    from bench.common import Engine, load_data
    from bench.suites import gpu

    engine = Engine(opts.scratch)
    data = load_data(SYNTHETIC_1M, opts.scratch / "engine")[0]
    probe = gpu._lightgbm_gpu_probe()
    rounds = gpu.FULL["rounds"]
    out.figures(gpu._lightgbm(engine, SYNTHETIC_1M, "synthetic 1M", rounds, 2, device, opts, lambda _: data,
                              probe))


NETWORK_BATCHES_GROUP = "network on CUDA · fp32 · batch sizes"


def step_network_batches(opts, device, out: Lines) -> None:
    """What bounds the network loop's rows/s: its rate and time per step at several batch sizes, and the
    kernels a step launches with the GPU's busy share (bench.suites.nn_loop.batch_sweep)."""
    from bench.common import guarded
    from bench.suites import nn_loop

    names = [n for _, n, _ in _planned("network-batches")]
    out.figures(guarded(NETWORK_BATCHES_GROUP, names,
                        lambda: nn_loop.batch_sweep(opts, "cuda", NETWORK_BATCHES_GROUP, device)))


def _lightgbm_largest_group() -> str:
    return f"LightGBM CUDA build · {_largest_name()}"


def step_lightgbm_largest(opts, device, out: Lines) -> None:
    """LightGBM's CUDA learner vs its CPU learner at the flagship's largest size (KIT_LARGEST_ROWS x 20
    features, 200 rounds, max_bin 63), once each: whether the CUDA learner overtakes the CPUs past 1M rows."""
    rows = ["data=synthetic", f"data.rows={LARGEST_ROWS}"]
    out.figures(_cuda_build_vs_cpu(opts, device, rows, _lightgbm_largest_group(), 1))


def _cuda_build_vs_cpu(opts, device, rows: list[str], group: str, repeats: int) -> list[dict]:
    """The CUDA build's CUDA learner vs its CPU learner on the data `rows` makes: one holdout model from
    loaded data, 200 fixed rounds, max_bin 63 on both."""
    from bench.common import Engine, guarded, load_data
    from bench.suites import gpu

    engine = Engine(opts.scratch)
    data = load_data(rows, opts.scratch / "engine")[0]
    common = rows + ["model=lightgbm", "tracking=none", "hpo=none", "parallelism=default",
                     f"model.lightgbm.params.num_iterations={gpu.FULL['rounds']}",
                     "model.lightgbm.params.early_stopping_round=0", "++model.lightgbm.params.max_bin=63"]
    cuda_ov = common + ["++model.lightgbm.params.device_type=cuda", "model.lightgbm.resources.num_gpus=1"]
    return guarded(group, CUDA_FIGURES, lambda: gpu._compare(engine, data, "lightgbm", group, repeats, device,
                                                             ("CPU", common), ("CUDA", cuda_ov)))


def step_xgboost(opts, device, out: Lines) -> None:
    from bench.common import Engine, load_data
    from bench.suites import gpu

    engine = Engine(opts.scratch)
    data = load_data(SYNTHETIC_1M, opts.scratch / "engine")[0]
    rounds = gpu.FULL["rounds"]
    out.figures(gpu._xgboost(engine, SYNTHETIC_1M, "synthetic 1M", rounds, 2, device, opts, lambda _: data))


PACK_REPEATS = 1  # the H100's three repeats of each side spread by under 10%
PLANNER_PACKS = ["+hardware=1gpu", "model=nn_gpu", "parallelism.num_folds=2",
                 "model.nn.resources.num_gpus=null", "dry_run=true", "tracking=none"]


def step_packing(opts, device, out: Lines) -> None:
    """Packed vs one after the other with the shares set; then whether the planner, left to derive them,
    packs two network folds on one GPU (1) or gives each a whole device (0), from the dry run's plan."""
    from bench.common import Engine, guarded
    from bench.suites import gpu

    engine = Engine(opts.scratch)
    out.figures(guarded(gpu.PACK_GROUP, gpu.PACK_FIGURES,
                        lambda: gpu._packing(engine, opts, gpu.FULL, PACK_REPEATS, device)))
    out.figures(guarded(gpu.PACK_GROUP, ["packed by the planner"], lambda: [_planner_packs(opts, device)]))


def _planner_packs(opts, device) -> dict:
    from bench.common import figure
    from bench.suites import gpu

    cwd = opts.scratch / "planner"
    cwd.mkdir(parents=True, exist_ok=True)
    run_dir = cwd / "run"
    cmd = [sys.executable, "-m", "pipeline", *PLANNER_PACKS, f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"the dry run exited {proc.returncode}: {proc.stderr[-400:]}")
    (model,) = json.loads((run_dir / "plan.json").read_text())["models"]
    packed = float(model["fit"]["num_gpus"] < 1 and model["folds_parallel"] > 1)
    return figure("packed by the planner", [packed], "", group=gpu.PACK_GROUP, device=device,
                  fit=model["fit"], folds_parallel=model["folds_parallel"],
                  reason=model.get("gpu_packing_reason"),
                  command="python -m pipeline " + " ".join(PLANNER_PACKS))


STARTUP_REPEATS = 3


def step_startup(opts, device, out: Lines) -> None:
    from bench.suites import startup

    opts.repeats = STARTUP_REPEATS
    figures = startup.run(opts)["figures"]
    for f in figures:
        if "dry_run=true" in f["name"] and "median" in f:
            op, value = DRY_RUN_TARGET
            f["target"] = {"op": op, "value": value}
            f["meets_target"] = f["median"] <= value
            f["device"] = device
    out.figures(figures)


def step_tracked(opts, device, out: Lines) -> None:
    from bench.common import guarded
    from bench.suites.fixed_cost import GPU_RUNS, Runner, _gpu_overhead, _stop_services

    runner = _runner(Runner, opts.scratch / "tracked")
    def measure():
        return _gpu_overhead(runner, TRACKED, GPU_RUNS[TRACKED], [], 2)

    try:
        group = f"whole process · Adult · {TRACKED} · +hardware=1gpu"
        out.figures(guarded(group, ["tracked / untracked"], measure))
    finally:
        _stop_services(runner)


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
    "network-batches": step_network_batches,
    "lightgbm-largest": step_lightgbm_largest,
}


def run_only(step: str, path: Path, scratch: Path, device: str | None) -> int:
    """One step in this process, its results appended to `path` as they come (Lines); an error that
    escapes the step is written there too, for the call's record."""
    from bench.common import log, no_cuda_reason

    out = Lines(path)
    if device is None:
        if step != "lightgbm-opencl":
            out.figures(not_measured_all(step, no_cuda_reason()))
        return 0
    if step != "lightgbm-opencl":
        log(f"step {step}")
    try:
        STEP_FUNCTIONS[step](_opts(scratch, False), device, out)
    except Exception as exc:  # noqa: BLE001  (recorded, then the step fails as a whole)
        traceback.print_exc()
        text = str(exc).strip().splitlines()
        out.error(f"{type(exc).__name__}: {text[0][:400] if text else ''}")
        return 1
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.device.steps", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", required=True, choices=sorted(STEP_FUNCTIONS), help="the step to run")
    p.add_argument("--json", type=Path, required=True, help="where its results go, one JSON line each")
    p.add_argument("--scratch", type=Path, required=True)
    p.add_argument("--device", default=None, help="the CUDA device's name, empty for none (default: asked)")
    args = p.parse_args(argv)
    args.scratch.mkdir(parents=True, exist_ok=True)
    if args.device is None:
        from bench.common import cuda_device_name

        device = cuda_device_name()
    else:
        device = args.device or None
    return run_only(args.only, args.json, args.scratch, device)


if __name__ == "__main__":
    sys.exit(main())
