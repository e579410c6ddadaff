"""The fixed cost of a run, as whole processes side by side: the plain script, the engine untracked and
tracked (SQLite store that exists, models logged), start-up, a 5-fold bag in parallel vs one fold at a
time, a 16-job `hydra/launcher=gpu` sweep, and tracked vs untracked for `model=gbm_gpu` and
`model=nn_gpu` on one GPU (not measured without CUDA). Each repeat runs every variant of a comparison in
turn, the order rotating, so ratios pair runs taken under the same load; scores are checked equal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import Options, cpu_cores, figure, fit_makespan, guarded, log, ratios

ENGINE = [sys.executable, "-m", "pipeline"]
PLAIN = [sys.executable, "-m", "bench.plain"]
TARGETS = {"tracked": ("<=", 1.3), "untracked": ("<=", 1.05), "help": ("<=", 0.8), "dry_run": ("<=", 1.2),
           "bag": ("<=", 1.0), "sweep": ("<=", 1.5)}


def run(opts: Options) -> dict:
    cwd = opts.scratch / "fixed_cost"
    cwd.mkdir(parents=True, exist_ok=True)
    rows = ["data.max_rows=5000"] if opts.quick else []
    n = opts.n(5, 2)
    runtime = cwd / "xdg_runtime"  # the tracker services of the benchmark's runs, apart from the user's
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "COLUMNS": "200", "XDG_RUNTIME_DIR": str(runtime)}
    runner = Runner(cwd, env)
    try:
        return _run(opts, runner, cwd, rows, n)
    finally:
        _stop_services(runner)


def _run(opts: Options, runner: "Runner", cwd: Path, rows: list[str], n: int) -> dict:
    figures, loads = [], {"start": os.getloadavg()}
    figures += guarded("run: plain / untracked / tracked", ["tracked / untracked"],
                       lambda: _overhead(runner, rows, n))
    figures += guarded("MLflow alone", ["MLflow's work alone seconds"], lambda: _mlflow_alone(runner, n))
    loads["after overhead"] = os.getloadavg()
    # with a tracker process of the run's own, which the profile then shows
    profiles = [_profile(runner, ["model=lightgbm", "tracking.keep_alive_s=0"] + rows),
                _profile(runner, ["dry_run=true", "+hardware=4gpu", "model=all", "tracking=none"])]
    figures += guarded("start-up", ["--help"], lambda: _startup(runner, opts.n(10, 3)))
    figures += guarded("5-fold bag", ["parallel / one at a time"], lambda: _bag(runner, rows, n))
    loads["after bag"] = os.getloadavg()
    figures += guarded("16-job sweep", ["seconds per job beyond its fit"],
                       lambda: _sweep(runner, rows, 4 if opts.quick else 16, opts.n(3, 1)))
    for name, args in GPU_RUNS.items():
        figures += guarded(f"whole process · Adult · {name}", ["tracked / untracked"],
                           lambda name=name, args=args: _gpu_overhead(runner, name, args, rows, n))
    loads["end"] = os.getloadavg()
    return {
        "settings": {
            "repeats": n, "cores": cpu_cores(), "data": "Adult" + (" (5,000 rows)" if rows else ""),
            "load_average_1_5_15_min": {k: [round(x, 2) for x in v] for k, v in loads.items()},
            "fsync_ms_in_scratch": _fsync_ms(cwd),
            "timer": "subprocess wall time, start to exit; the variants of a comparison alternate within each "
                     "repeat (order rotating); one untimed run of each first (file cache, SQLite store created)",
            "plain": "python -m bench.plain: the engine's loader and split, lgb.train with the engine's "
                     "parameters, seed and threads, early stopping on validation, test ROC AUC",
        },
        "figures": figures,
        "profiles": profiles,
        "notes": ["Timings on a shared machine are noisy: compare the ratios (paired per repeat) and read "
                  "the load averages in the settings."],
    }


def _fsync_ms(folder: Path, n: int = 50) -> dict:
    """Milliseconds a 4 KiB write and fsync take in `folder`, where the runs' SQLite store lives: a
    tracked run commits to it some 30 times, each commit several syncs (87 syncs in all for one
    model=lightgbm run, counted with strace on the 2-core box), so a slow disk shows in the overhead."""
    import statistics

    path, times = folder / "fsync-probe", []
    with open(path, "wb") as fh:
        for _ in range(n):
            t0 = time.perf_counter()
            fh.write(os.urandom(4096))
            fh.flush()
            os.fsync(fh.fileno())
            times.append((time.perf_counter() - t0) * 1000)
    path.unlink()
    return {"median": round(statistics.median(times), 3), "max": round(max(times), 3), "n": n}


PROFILE_HOOK = Path(__file__).resolve().parents[1] / "profile_hook"


def _profile(runner: "Runner", args: list[str]) -> dict:
    """One run with every process profiling itself (bench/profile_hook): where the run's process and
    the tracker's spent their time, for a box whose tracked overhead or dry run needs explaining. Not
    timed against anything: cProfile slows Python code down."""
    folder = runner.cwd / "profile"
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.json"):
        old.unlink()
    path = os.pathsep.join(filter(None, [str(PROFILE_HOOK), runner.env.get("PYTHONPATH")]))
    env = {**runner.env, "PYTHONPATH": path, "PIPELINE_BENCH_PROFILE": str(folder)}
    log(f"fixed_cost: {' '.join(args)} under cProfile")
    try:
        seconds, _ = runner.engine(args, env=env)
    except Exception as exc:  # noqa: BLE001  (the profile is an aid: its failure loses no figure)
        return {"status": "failed", "reason": f"{type(exc).__name__}: {str(exc)[:300]}"}
    processes = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    processes.sort(key=lambda p: -(p["cpu_user_s"] + p["cpu_system_s"]))
    return {"command": "python -m pipeline " + " ".join(args), "wall_s_under_profiler": round(seconds, 3),
            "processes": processes}


class Runner:
    def __init__(self, cwd: Path, env: dict):
        self.cwd, self.env, self.count = cwd, env, 0
        self.launched: dict[Path, float] = {}

    def engine(self, args: list[str], env: dict | None = None) -> tuple[float, Path]:
        self.count += 1
        run_dir = self.cwd / "runs" / f"{self.count:04d}"
        self.launched[run_dir] = time.time()  # the timeline's clock: when the process was started
        seconds, _ = self.call(ENGINE + args + [f"hydra.run.dir={run_dir}"], env)
        return seconds, run_dir

    def call(self, cmd: list[str], env: dict | None = None) -> tuple[float, str]:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=self.cwd, env=env or self.env, capture_output=True, text=True, timeout=1800)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[1:])} exited {proc.returncode}: {proc.stderr[-2000:]}")
        return seconds, proc.stdout


def _services(runner: Runner) -> list:
    """The tracker services the benchmark's runs started (pipeline.tracking.service), as psutil processes."""
    import psutil

    from pipeline.tracking.service import service_pids

    procs = []
    for pid in service_pids(Path(runner.env["XDG_RUNTIME_DIR"]) / "pipeline"):
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    return procs


def _stop_services(runner: Runner) -> None:
    """Retire the services and wait until they have exited (not timed)."""
    import psutil

    procs = _services(runner)
    runner.call([sys.executable, "-m", "pipeline.tracking.service", "--stop"])
    _, alive = psutil.wait_procs(procs, timeout=60)
    for proc in alive:
        proc.kill()


def _settle(runner: Runner, quiet_s: float = 1.0, limit_s: float = 30.0) -> None:
    """Wait until the services have used no CPU for `quiet_s` (one warms up once the run that started
    it has ended), so that no timed run shares the cores with that."""
    import psutil

    deadline = time.time() + limit_s
    for proc in _services(runner):
        try:
            while time.time() < deadline:
                before = sum(proc.cpu_times()[:2])
                time.sleep(quiet_s)
                if sum(proc.cpu_times()[:2]) - before < 0.02:
                    break
        except psutil.NoSuchProcess:
            continue


def _test_auc(run_dir: Path, model: str = "lightgbm") -> float:
    import pandas as pd

    board = pd.read_csv(run_dir / "leaderboard.csv")
    return float(board.loc[board.model == model, "test_roc_auc"].iloc[0])


def _rotations(names: list[str], n: int):
    for r in range(n):
        k = r % len(names)
        yield r, names[k:] + names[:k]


def _overhead(runner: Runner, rows: list[str], n: int) -> list[dict]:
    """Tracked three ways: through the tracker service a run before started (the default, from the
    second run on), as the run that starts it (no service waiting: the first run, or one after
    keep_alive_s), and with a tracker process of its own (tracking.keep_alive_s=0)."""
    base = ["model=lightgbm"] + rows
    variants = {"untracked": base + ["tracking=none"], "tracked": base, "tracked, starting the service": base,
                "tracked, own process": base + ["tracking.keep_alive_s=0"]}
    plain_cmd = PLAIN + ([f"--max-rows={rows[0].split('=')[1]}"] if rows else [])
    runner.engine(variants["tracked"])  # creates the SQLite store; not timed
    runner.call(plain_cmd)
    wall = {"plain": [], **{name: [] for name in variants}}
    auc = {k: [] for k in wall}
    for r, order in _rotations(list(wall), n):
        for name in order:
            log(f"fixed_cost: {name} {r + 1}/{n}")
            if name == "tracked, starting the service":
                _stop_services(runner)
            if name == "plain":
                sec, out = runner.call(plain_cmd)
                auc[name].append(json.loads(out.strip().splitlines()[-1])["test_roc_auc"])
            else:
                sec, run_dir = runner.engine(variants[name])
                auc[name].append(_test_auc(run_dir))
            wall[name].append(sec)
            _settle(runner)
    group = "whole process · Adult · LightGBM"
    same = all(auc[name] == auc["untracked"] for name in variants)
    close = all(abs(a - b) < 1e-12 for a, b in zip(auc["plain"], auc["untracked"]))
    return [
        figure("tracked / untracked", ratios(wall["tracked"], wall["untracked"]), "ratio", group=group,
               target=TARGETS["tracked"]),
        figure("tracked, starting the service / untracked",
               ratios(wall["tracked, starting the service"], wall["untracked"]), "ratio", group=group),
        figure("tracked, own process / untracked", ratios(wall["tracked, own process"], wall["untracked"]),
               "ratio", group=group),
        figure("untracked / plain script", ratios(wall["untracked"], wall["plain"]), "ratio", group=group,
               target=TARGETS["untracked"]),
        figure("plain script seconds", wall["plain"], "s", group=group),
        figure("untracked seconds (tracking=none)", wall["untracked"], "s", group=group),
        figure("tracked seconds (MLflow, SQLite, models logged; the tracker service)", wall["tracked"], "s",
               group=group),
        figure("tracked seconds, the run that starts the service", wall["tracked, starting the service"], "s",
               group=group),
        figure("tracked seconds, tracker process of its own (tracking.keep_alive_s=0)",
               wall["tracked, own process"], "s", group=group),
        figure("test ROC AUC, tracked", auc["tracked"], "roc_auc", group=group, kind="score",
               identical=same, compared_with="the untracked run's (every tracked variant)"),
        figure("test ROC AUC, plain script", auc["plain"], "roc_auc", group=group, kind="score",
               identical=close, compared_with="the untracked run's (to 1e-12)"),
    ]


def _mlflow_alone(runner: Runner, n: int) -> list[dict]:
    """The MLflow work of one tracked run as a process of its own, with no fit (bench.mlflow_alone on a
    tracked run's directory): a tracked run's tracker process does this work beside the run, so a
    tracked run cannot end sooner than this process takes, after the moment it starts its tracker."""
    from bench.mlflow_alone import write_example

    run_dir = max((p.parent for p in runner.cwd.glob("runs/*/timeline.png")), key=lambda p: p.name)
    example = runner.cwd / "example.pkl"
    write_example(example)
    cmd = [sys.executable, "-m", "bench.mlflow_alone", str(run_dir), str(example)]
    runner.call(cmd)  # the experiment is created; not timed
    wall, cpu = [], []
    for r in range(n):
        log(f"fixed_cost: MLflow alone {r + 1}/{n}")
        seconds, out = runner.call(cmd)
        result = json.loads(out.strip().splitlines()[-1])
        if result["failure"]:
            raise RuntimeError(f"MLflow alone: {result['failure']}")
        wall.append(seconds)
        cpu.append(result["cpu_s"])
    group = "whole process · MLflow's work of one tracked model=lightgbm run, no fit"
    return [figure("MLflow's work alone seconds", wall, "s", group=group),
            figure("MLflow's work alone CPU seconds", cpu, "s", group=group)]


GPU_RUNS = {"model=gbm_gpu": ["+hardware=1gpu", "model=gbm_gpu"], "model=nn_gpu": ["+hardware=1gpu", "model=nn_gpu"]}


def _gpu_overhead(runner: Runner, name: str, args: list[str], rows: list[str], n: int) -> list[dict]:
    """The tracked/untracked comparison for a GPU model on one GPU (whole processes, alternating)."""
    group = f"whole process · Adult · {name} · +hardware=1gpu"
    names = ["tracked / untracked", "untracked seconds (tracking=none)", "tracked seconds (MLflow, SQLite, models logged)"]
    from bench.common import cuda_device_name, no_cuda_reason, not_measured

    device = cuda_device_name()
    if device is None:
        return [not_measured(x, no_cuda_reason(), group=group) for x in names]
    variants = {"untracked": args + rows + ["tracking=none"], "tracked": args + rows}
    runner.engine(variants["tracked"])  # kernels compiled and caches filled; not timed
    wall, auc, _ = _alternate(runner, variants, n, name, _best_auc)
    return [
        figure(names[0], ratios(wall["tracked"], wall["untracked"]), "ratio", group=group,
               target=TARGETS["tracked"], device=device),
        figure(names[1], wall["untracked"], "s", group=group, device=device),
        figure(names[2], wall["tracked"], "s", group=group, device=device),
        figure("best test ROC AUC, tracked", auc["tracked"], "roc_auc", group=group, kind="score", device=device,
               identical=auc["tracked"] == auc["untracked"], compared_with="the untracked run's"),
    ]


def _alternate(runner: Runner, variants: dict[str, list[str]], n: int, label: str, score,
               each=None) -> tuple[dict, dict, dict]:
    """Each variant's engine run n times, the order rotating: wall seconds and `score(run_dir)` per
    variant, and each variant's first run directory; `each(variant, run_dir)` after every run."""
    wall: dict[str, list[float]] = {k: [] for k in variants}
    scores: dict[str, list[float]] = {k: [] for k in variants}
    first: dict[str, Path] = {}
    for r, order in _rotations(list(variants), n):
        for name in order:
            log(f"fixed_cost: {label} {name} {r + 1}/{n}")
            sec, run_dir = runner.engine(variants[name])
            wall[name].append(sec)
            scores[name].append(score(run_dir))
            first.setdefault(name, run_dir)
            if each is not None:
                each(name, run_dir)
    return wall, scores, first


def _best_auc(run_dir: Path) -> float:
    import pandas as pd

    return float(pd.read_csv(run_dir / "leaderboard.csv").test_roc_auc.iloc[0])  # best first


# The library parameter checks a dry run makes (model=all's params from conf/model), timed inside a fresh process.
CHECKS = """
import json, sys, time
from omegaconf import OmegaConf
from pipeline.models import LightGBMModel, TorchMLPModel, XGBoostModel
specs = [(cls, name, OmegaConf.to_container(OmegaConf.load(f"{sys.argv[1]}/{name}.yaml")[name].params))
         for cls, name in ((LightGBMModel, "lightgbm"), (XGBoostModel, "xgboost"), (TorchMLPModel, "nn"))]
t0 = time.perf_counter()
for cls, name, params in specs:
    cls.check_params(name, params)
print(json.dumps(time.perf_counter() - t0))
"""
CONF_MODELS = Path(__file__).resolve().parents[2] / "conf" / "model"


def _startup(runner: Runner, n: int) -> list[dict]:
    commands = {"help": ["--help"], "dry_run": ["dry_run=true", "+hardware=4gpu", "model=all"]}
    for args in commands.values():
        runner.call(ENGINE + args)
    wall = {k: [] for k in commands}
    checks = []
    for r, order in _rotations(list(commands), n):
        for name in order:
            wall[name].append(runner.call(ENGINE + commands[name])[0])
        checks.append(float(runner.call([sys.executable, "-c", CHECKS, str(CONF_MODELS)])[1].strip()))
    return [
        figure("python -m pipeline --help", wall["help"], "s", group="start-up", target=TARGETS["help"]),
        figure("python -m pipeline dry_run=true +hardware=4gpu model=all", wall["dry_run"], "s", group="start-up",
               target=TARGETS["dry_run"]),
        figure("of which: LightGBM, XGBoost and network parameter checks (in-process, first call)", checks, "s",
               group="start-up"),
    ]


def _bag(runner: Runner, rows: list[str], n: int) -> list[dict]:
    base = ["model=lightgbm", "parallelism=bag5", "tracking=none"] + rows
    variants = {"parallel": base, "one at a time": base + ["parallelism.sequential=true"]}
    phases = {name: {"start": [], "fits": []} for name in variants}

    def split(name: str, run_dir: Path) -> None:
        """Where a run's time went: process start to its first fit, and the fits (first start to last end)."""
        timeline = json.loads((run_dir / "timeline.json").read_text())
        phases[name]["start"].append(min(e["start"] for e in timeline) - runner.launched[run_dir])
        phases[name]["fits"].append(fit_makespan(timeline))

    wall, auc, first = _alternate(runner, variants, n, "bag5", _test_auc, each=split)
    written = {name: json.loads((run_dir / "plan.json").read_text()) for name, run_dir in first.items()}
    plans = {name: _fit_schedule(plan) for name, plan in written.items()}
    group = "whole process · Adult · LightGBM · parallelism=bag5"
    plan = plans["parallel"]["models"][0]
    reason = written["parallel"]["models"][0].get("folds_parallel_reason", "")
    same = plans["parallel"] == plans["one at a time"]
    return [
        figure("parallel / one at a time", ratios(wall["parallel"], wall["one at a time"]), "ratio", group=group,
               target=TARGETS["bag"], folds_parallel=plan["folds_parallel"],
               reason=reason, same_plan=same,
               note=("the planner ran the folds one at a time here: both variants ran the same plan, so the "
                     "ratio is run-to-run noise" if same else "")),
        figure("parallel seconds", wall["parallel"], "s", group=group),
        figure("one at a time seconds (parallelism.sequential=true)", wall["one at a time"], "s", group=group),
        *[figure(f"{name}: {what}", phases[name][key], "s", group=group)
          for name in variants
          for key, what in (("start", "process start to first fit seconds"),
                            ("fits", "fit phase seconds (first fit start to last fit end)"))],
        figure("test ROC AUC, parallel", auc["parallel"], "roc_auc", group=group, kind="score",
               identical=auc["parallel"] == auc["one at a time"], compared_with="the one-at-a-time run's"),
    ]


def _fit_schedule(plan: dict) -> dict:
    """What decides how a run's fits run: its plan's models (folds and trials at once, threads) and
    fit tasks (waves, shares), without the planner's wording and the memory it saw free."""
    models = [{k: v for k, v in m.items() if k != "folds_parallel_reason" and "ram" not in k} for m in plan["models"]]
    return {"models": models, "tasks": plan.get("tasks")}


def _sweep(runner: Runner, rows: list[str], jobs: int, repeats: int) -> list[dict]:
    """Seconds each job spends beyond its own fit: (wall x jobs at once - sum of fit seconds) / jobs,
    for each of `repeats` sweeps."""
    import pandas as pd

    slots = min(jobs, cpu_cores())
    per_job, walls, fits = [], [], []
    for r in range(repeats):
        sweep_dir = runner.cwd / f"sweep-{r}"
        args = ["-m", "hydra/launcher=gpu", "hydra.launcher.gpus_per_job=0", "model=lightgbm",
                f"seed=range(0,{jobs})", f"hydra.sweep.dir={sweep_dir}"] + rows
        log(f"fixed_cost: {jobs}-job sweep {r + 1}/{repeats}")
        wall, _ = runner.call(ENGINE + args)
        sweep_fits = [float(pd.read_csv(p).fit_seconds.iloc[0]) for p in sorted(sweep_dir.glob("*/leaderboard.csv"))]
        if len(sweep_fits) != jobs:
            raise RuntimeError(f"the sweep left {len(sweep_fits)} leaderboards for {jobs} jobs")
        per_job.append((wall * slots - sum(sweep_fits)) / jobs)
        walls.append(wall)
        fits += sweep_fits
    group = f"{jobs}-job sweep · hydra/launcher=gpu (CPU slots) · LightGBM · tracked"
    return [
        figure("seconds per job beyond its fit", per_job, "s", group=group, target=TARGETS["sweep"],
               jobs_at_once=slots),
        figure("sweep wall seconds", walls, "s", group=group),
        figure("fit seconds per job", fits, "s", group=group),
    ]
