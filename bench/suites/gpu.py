"""GPU figures: XGBoost CUDA vs CPU hist and LightGBM OpenCL vs CPU on each data set, the network loops
on the GPU, two half-GPU fits packed on one device vs one after the other, and `pytest -m gpu`.

Without a CUDA device every figure is written as not measured, with the reason.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

from bench.common import (
    ROOT,
    Engine,
    Options,
    cpu_cores,
    cpu_model,
    figure,
    fit_makespan,
    guarded,
    leaderboard_scores,
    load_data,
    log,
    no_cuda_reason,
    not_measured,
    ratios,
)

# Fixed boosting rounds without early stopping, so both devices do the same work.
FULL = {"rounds": 200, "synthetic": (1_000_000, 10_000_000), "bio_rows": None, "pack_rows": 1_000_000,
        "pack_epochs": 10}
QUICK = {"rounds": 50, "synthetic": (100_000, 1_000_000), "bio_rows": 20_000, "pack_rows": 100_000,
         "pack_epochs": 3}
PYTEST_TIMEOUT_S = 3600
PACK_BASE = ["+hardware=1gpu", "model=nn_gpu", "tracking=none", "hpo=none", "parallelism=default",
             "parallelism.num_folds=2", "parallelism.fit.num_gpus=0.5",
             # nn_gpu asks for a whole GPU per fit at the model level, which would win over parallelism.fit
             "model.nn.resources.num_gpus=null", "model.nn.params.patience=0",
             # device=auto puts a network this small on the CPUs: packing on the GPU is what is measured
             "model.nn.device=cuda"]


def _datasets(opts: Options, s: dict) -> dict:
    out = {}
    if opts.bio_train.exists():
        bio = ["data=parquet", f"data.path={opts.bio_train}", "data.label=target",
               "data.drop_columns=[EXAMPLE_ID,BLOCK_ID]"]
        out["bio_train"] = bio + ([f"data.max_rows={s['bio_rows']}"] if s["bio_rows"] else [])
    else:
        out["bio_train"] = None
    for rows in s["synthetic"]:
        out[f"synthetic {_rows(rows)}"] = ["data=synthetic", f"data.rows={rows}"]
    return out


def _rows(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k"


XGB_FIGURES = ("CPU hist seconds", "CUDA seconds", "speed-up CPU/CUDA (wall)", "speed-up CPU/CUDA (model.fit)")
LGB_FIGURES = ("CPU seconds", "OpenCL gpu seconds", "speed-up CPU/GPU (wall)", "speed-up CPU/GPU (model.fit)")
NN_FIGURES = tuple((f"network on CUDA · {p}", name, unit) for p in ("fp32", "bf16-mixed")
                   for name, unit in (("engine loop rows/s", "rows/s"), ("DataLoader loop rows/s", "rows/s"),
                                      ("speed-up engine/DataLoader", "x"))) + (
    ("network on CUDA · fp32", "engine loop rows/s · compile=reduce-overhead", "rows/s"),
    ("network on CUDA · fp32", "speed-up CUDA graphs/eager", "x"))
PACK_GROUP = "two 0.5-GPU network fits"
PACK_FIGURES = ("one after the other seconds", "packed on one GPU seconds", "speed-up (wall)", "speed-up (fit phase)")


def _planned(opts: Options, s: dict) -> list[tuple[str, str, str]]:
    """(group, figure, unit) of every GPU figure, for the not-measured case."""
    out = []
    for name in _datasets(opts, s):
        out += [(f"XGBoost · {name}", f, "x" if "speed-up" in f else "s") for f in XGB_FIGURES]
        out += [(f"LightGBM · {name}", f, "x" if "speed-up" in f else "s") for f in LGB_FIGURES]
    out += list(NN_FIGURES)
    out += [(PACK_GROUP, f, "x" if "speed-up" in f else "s") for f in PACK_FIGURES]
    out.append(("pytest", "pytest -m gpu", ""))
    return out


def run(opts: Options) -> dict:
    import torch

    s = QUICK if opts.quick else FULL
    if not torch.cuda.is_available():
        reason = no_cuda_reason()
        return {
            "status": "not measured", "reason": reason, "settings": dict(s),
            "figures": [not_measured(name, reason, group=g, unit=u) for g, name, u in _planned(opts, s)],
            "notes": [],
        }
    device = torch.cuda.get_device_name(0)
    engine = Engine(opts.scratch)
    figures, notes = [], []
    # the tests first: what the GPU paths do matters more than how fast they are, should the run be cut short
    pytest_result = _pytest_gpu(device, opts.scratch / "pytest-gpu.log")
    n = opts.n(3, 2)
    datasets = _datasets(opts, s)
    loaded = {}

    def data_for(name):
        if name not in loaded:
            loaded.clear()  # one data set in memory at a time (10M rows)
            log(f"gpu: loading {name}")
            loaded[name] = load_data(datasets[name], opts.scratch / "engine")[0]
        return loaded[name]

    rounds = s["rounds"]
    probe = _lightgbm_gpu_probe()
    for name, ov in datasets.items():  # both libraries per data set: each set is loaded once
        figures += _xgboost(engine, ov, name, rounds, n, device, opts, data_for)
        figures += _lightgbm(engine, ov, name, rounds, n, device, opts, data_for, probe)
    loaded.clear()

    from bench.suites import nn_loop

    nn_settings = {}

    def network():
        measured, settings = nn_loop.measure(opts, "cuda", "network on CUDA", device)
        nn_settings.update(settings)
        return measured

    figures += guarded("network on CUDA", [f"{g.split(' · ')[1]} · {name}" for g, name, _ in NN_FIGURES], network)
    figures += guarded(PACK_GROUP, PACK_FIGURES, lambda: _packing(engine, opts, s, n, device))
    figures.append(pytest_result)
    if pytest_result["outcome"] != "passed":
        notes.append(f"pytest -m gpu: {pytest_result.get('summary')}")
    return {
        "settings": dict(s, device=device, cpu=cpu_model(), cores=cpu_cores(), repeats=n, network=nn_settings,
                         boosting="fixed rounds, early stopping off, the engine in this process from loaded data "
                                  "(model.fit seconds from its leaderboard); LightGBM max_bin=63 on both devices, "
                                  "gpu_use_dp on the GPU (as model=gbm_gpu)",
                         packing=" ".join(PACK_BASE) + " vs the same with parallelism.sequential=true"),
        "figures": figures,
        "notes": notes,
    }


def _xgboost(engine: Engine, ov, name: str, rounds: int, n: int, device: str, opts: Options, data_for) -> list[dict]:
    group = f"XGBoost · {name}"
    if ov is None:
        return [not_measured(f, f"{opts.bio_train} does not exist", group=group) for f in XGB_FIGURES]
    common = ov + ["model=xgboost", "tracking=none", "hpo=none", "parallelism=default",
                   f"model.xgboost.params.num_boost_round={rounds}", "model.xgboost.params.early_stopping_rounds=null"]
    gpu_ov = common + ["++model.xgboost.params.device=cuda", "model.xgboost.resources.num_gpus=1"]
    return guarded(group, XGB_FIGURES, lambda: _compare(
        engine, data_for(name), "xgboost", group, n, device, ("CPU hist", common), ("CUDA", gpu_ov)))


def _lightgbm(engine: Engine, ov, name: str, rounds: int, n: int, device: str, opts: Options, data_for,
              probe) -> list[dict]:
    """LightGBM's CPU learner vs its OpenCL learner with model=gbm_gpu's settings (max_bin 63, gpu_use_dp)."""
    group = f"LightGBM · {name}"
    if probe is not None:
        return [not_measured(f, probe, group=group) for f in LGB_FIGURES]
    if ov is None:
        return [not_measured(f, f"{opts.bio_train} does not exist", group=group) for f in LGB_FIGURES]
    common = ov + ["model=lightgbm", "tracking=none", "hpo=none", "parallelism=default",
                   f"model.lightgbm.params.num_iterations={rounds}", "model.lightgbm.params.early_stopping_round=0",
                   "++model.lightgbm.params.max_bin=63"]
    gpu_ov = common + ["++model.lightgbm.params.device_type=gpu", "++model.lightgbm.params.gpu_use_dp=true",
                       "model.lightgbm.resources.num_gpus=1"]
    return guarded(group, LGB_FIGURES, lambda: _compare(
        engine, data_for(name), "lightgbm", group, n, device, ("CPU", common), ("OpenCL gpu", gpu_ov)))


def _compare(engine: Engine, data, model: str, group: str, n: int, device: str, cpu, gpu) -> list[dict]:
    cpu_label, gpu_label = cpu[0], gpu[0]
    wall = {cpu_label: [], gpu_label: []}
    fit = {cpu_label: [], gpu_label: []}
    auc = {cpu_label: [], gpu_label: []}
    fitted_on = {cpu_label: set(), gpu_label: set()}  # what each fit's record names (the device LightGBM announced)
    engine.clean(engine.run(gpu[1], data))  # warm-up: CUDA context, kernels
    for r in range(n):
        order = (cpu, gpu) if r % 2 == 0 else (gpu, cpu)
        for label, ov in order:
            log(f"gpu: {group} {label} {r + 1}/{n}")
            res = engine.run(ov, data)
            wall[label].append(res.seconds)
            fit[label].append(float(res.leaderboard["fit_seconds"].iloc[0]))
            auc[label].append(leaderboard_scores(res.leaderboard)[model]["test"])
            fitted_on[label] |= {str(e.get("device")) for e in res.timeline}
            engine.clean(res)
    return [
        figure(f"{cpu_label} seconds", wall[cpu_label], "s", group=group, device=cpu_model(),
               fitted_on=sorted(fitted_on[cpu_label])),
        figure(f"{gpu_label} seconds", wall[gpu_label], "s", group=group, device=device,
               fitted_on=sorted(fitted_on[gpu_label])),
        figure(f"speed-up CPU/{'CUDA' if gpu_label == 'CUDA' else 'GPU'} (wall)",
               ratios(wall[cpu_label], wall[gpu_label]), "x", group=group, device=device),
        figure(f"speed-up CPU/{'CUDA' if gpu_label == 'CUDA' else 'GPU'} (model.fit)",
               ratios(fit[cpu_label], fit[gpu_label]), "x", group=group, device=device),
        figure(f"{cpu_label} test ROC AUC", auc[cpu_label], "roc_auc", group=group, kind="score"),
        figure(f"{gpu_label} test ROC AUC", auc[gpu_label], "roc_auc", group=group, kind="score", device=device),
    ]


def _lightgbm_gpu_probe():
    """None when LightGBM's OpenCL learner trains on a GPU device; else why not (a CPU device, such as
    PoCL's, is an OpenCL device but would not measure a GPU)."""
    import lightgbm as lgb
    import numpy as np

    from pipeline.models.lightgbm_build import opencl_devices, opencl_gpu_device

    chosen = opencl_gpu_device(0)
    if not chosen:
        listed = [f"{d.name} ({d.vendor})" for devices in opencl_devices() for d in devices]
        return ("LightGBM's OpenCL loader lists no GPU device (it lists: "
                f"{', '.join(listed) or 'none'}; NVIDIA's driver registers its OpenCL library, "
                "libnvidia-opencl.so.1, as /etc/OpenCL/vendors/nvidia.icd)")
    X = np.random.default_rng(0).random((256, 4))
    try:
        lgb.train({"device_type": "gpu", "verbosity": -1, "num_iterations": 2, **chosen},
                  lgb.Dataset(X, X[:, 0] > 0.5))
    except lgb.basic.LightGBMError as exc:
        return (f"LightGBM's OpenCL learner (device_type=gpu) cannot run here: {str(exc).strip()} "
                "(the OpenCL runtime, which NVIDIA's driver ships as libnvidia-opencl, is missing or not registered)")
    return None


def _packing(engine: Engine, opts: Options, s: dict, n: int, device: str) -> list[dict]:
    group = PACK_GROUP
    data_ov = ["data=synthetic", f"data.rows={s['pack_rows']}"]
    data = load_data(data_ov, opts.scratch / "engine")[0]
    packed = data_ov + PACK_BASE + [f"model.nn.params.max_epochs={s['pack_epochs']}"]
    sequential = packed + ["parallelism.sequential=true"]
    warm_up = data_ov + PACK_BASE + ["model.nn.params.max_epochs=1", "parallelism.sequential=true"]
    engine.clean(engine.run(warm_up, data))
    wall = {"sequential": [], "packed": []}
    fits = {"sequential": [], "packed": []}
    for r in range(n):
        order = ("sequential", "packed") if r % 2 == 0 else ("packed", "sequential")
        for name in order:
            log(f"gpu: packing {name} {r + 1}/{n}")
            res = engine.run(sequential if name == "sequential" else packed, data)
            wall[name].append(res.seconds)
            fits[name].append(fit_makespan(res.timeline))
            engine.clean(res)
    return [
        figure("one after the other seconds", wall["sequential"], "s", group=group, device=device),
        figure("packed on one GPU seconds", wall["packed"], "s", group=group, device=device),
        figure("speed-up (wall)", ratios(wall["sequential"], wall["packed"]), "x", group=group, device=device,
               ideal=2.0),
        figure("speed-up (fit phase)", ratios(fits["sequential"], fits["packed"]), "x", group=group, device=device,
               ideal=2.0),
    ]


def _pytest_gpu(device: str, log_path, extra=(), env=None, name: str = "pytest -m gpu") -> dict:
    """`pytest -m gpu` as a subprocess; its whole output goes to log_path (kept with --keep-scratch)."""
    log(f"gpu: {name}")
    t0 = time.perf_counter()
    # only the files that hold gpu tests: a module the machine cannot import (ray, a browser) is none of
    # this run's business, and its collection error would fail the run
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                   if "pytest.mark.gpu" in p.read_text(errors="replace"))
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "--durations=0", *extra, *files]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=PYTEST_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return {"group": "pytest", "name": name, "unit": "", "kind": "result", "outcome": "timed out",
                "returncode": None, "summary": f"still running after {PYTEST_TIMEOUT_S} s", "seconds": PYTEST_TIMEOUT_S,
                "device": device, "tail": out[-3000:]}
    seconds = time.perf_counter() - t0
    log_path.write_text(proc.stdout + proc.stderr)
    lines = [l for l in proc.stdout.strip().splitlines() if l.strip()]
    counts = re.compile(r"\d+ (passed|failed|error|skipped|deselected)")
    summary = next((line.strip("= ").strip() for line in reversed(lines) if counts.search(line)),
                   lines[-1] if lines else f"exit code {proc.returncode}")
    outcome = {0: "passed", 5: "no test selected"}.get(proc.returncode, "failed")
    return {"group": "pytest", "name": name, "unit": "", "kind": "result",
            "outcome": outcome, "returncode": proc.returncode, "summary": summary, "seconds": seconds,
            "device": device, "tail": proc.stdout[-3000:]}
