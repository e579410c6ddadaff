"""A 16-trial TPE sweep on simulated GPUs, trials of uneven length: batches vs a trial per freed slot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, Options, figure, log, ratios

SLOTS = 2  # simulated GPUs, one job each; with 1 CPU per job this fills a 2-core machine


def run(opts: Options) -> dict:
    trials = 8 if opts.quick else 16
    rows = 5000 if opts.quick else 20000
    common = [
        "-m", "hydra/sweeper=optuna", "hydra.sweeper.direction=maximize", f"hydra.sweeper.n_trials={trials}",
        f"hydra.sweeper.n_jobs={SLOTS}", "hydra/launcher=gpu", "hydra.launcher.gpus_per_job=1",
        "hydra.launcher.cpus_per_job=1", "model=lightgbm", "data=adult", f"data.max_rows={rows}", "tracking=none",
        "model.lightgbm.params.num_iterations=400", "model.lightgbm.params.early_stopping_round=0",
        "model.lightgbm.params.num_leaves=int(interval(15, 255))",
    ]
    # TPE, as a search runs; random with a seed asks the same trials in both schedules, so only the
    # schedule differs (TPE's later trials depend on the order results arrive in)
    samplers = {"tpe": ["hydra/sweeper/sampler=tpe", "hydra.sweeper.sampler.seed=0"],
                "random": ["hydra/sweeper/sampler=random", "hydra.sweeper.sampler.seed=0"]}
    n = opts.n(1, 1)
    load_start = round(os.getloadavg()[0], 1)  # other work on the machine skews every figure
    figures, commands = [], {}
    for sampler, extra in samplers.items():
        measured = {s: {"wall": [], "idle": [], "busy": [], "best": []} for s in ("batch", "async")}
        for r in range(n):
            for schedule in (["batch", "async"] if r % 2 == 0 else ["async", "batch"]):
                log(f"async_sweep: {sampler} {schedule} {r + 1}/{n}")
                args = common + extra + [f"hydra.sweeper.schedule={schedule}"]
                out = _sweep(opts.scratch / f"async_sweep-{sampler}-{schedule}-{r}", args)
                for key in measured[schedule]:
                    measured[schedule][key].append(out[key])
        group = f"{sampler.upper() if sampler == 'tpe' else sampler} · {trials} trials on {SLOTS} simulated GPUs"
        for schedule in ("batch", "async"):
            m = measured[schedule]
            figures += [
                figure(f"{schedule}: sweep seconds", m["wall"], "s", group=group),
                figure(f"{schedule}: device idle fraction", m["idle"], "fraction", group=group),
                figure(f"{schedule}: job seconds (sum)", m["busy"], "s", group=group),
                figure(f"{schedule}: best val ROC AUC", m["best"], "roc_auc", group=group),
            ]
        figures.append(figure("speed-up async vs batch (wall)",
                              ratios(measured["batch"]["wall"], measured["async"]["wall"]), "x", group=group))
        commands[sampler] = "python -m pipeline " + " ".join(common + extra) + " hydra.sweeper.schedule=batch|async"
    return {
        "settings": {"load_average_1min": {"start": load_start, "end": round(os.getloadavg()[0], 1)},
                     "commands": commands, "env": f"PIPELINE_SIMULATE_GPUS={SLOTS}", "repeats": n, "slots": SLOTS,
                     "data": f"Adult, {rows} rows; LightGBM 400 rounds, no early stopping, num_leaves 15..255"},
        "figures": figures,
        "notes": [
            "Sweep seconds: the whole `python -m pipeline -m` process, start to exit. Device idle fraction: "
            "1 - (sum of the jobs' run spans, run_state.json started..ended) / (slots x the span from the first "
            "job's start to the last job's end); a job's process start-up counts as idle, as it is for the device.",
            "batch: Optuna asks n_jobs trials, the launcher runs them, each batch waits for its slowest job. "
            "async: a trial is asked and started the moment a slot frees.",
            "With TPE the two schedules sample different trials (TPE learns from results in the order they "
            "arrive), so compare their idle fractions and read the sweep seconds beside the jobs' summed seconds; "
            "the seeded random sampler gives both schedules the same trials.",
        ],
    }


def _sweep(workdir: Path, args: list[str]) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PIPELINE_SIMULATE_GPUS": str(SLOTS), "PYTHONPATH": os.pathsep.join(
        [str(ROOT), str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")])}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=workdir, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"the sweep failed ({proc.returncode}): {proc.stderr[-2000:]}")
    states = [json.loads(p.read_text()) for p in workdir.glob("outputs/multirun/*/*/*/run_state.json")]
    spans = [(s["started"], s["ended"]) for s in states]
    window = max(e for _, e in spans) - min(s for s, _ in spans)
    busy = sum(e - s for s, e in spans)
    (results,) = workdir.glob("outputs/multirun/*/*/optimization_results.yaml")
    import yaml

    best = yaml.safe_load(results.read_text())["best_value"]
    return {"wall": wall, "idle": 1 - busy / (SLOTS * window), "busy": busy, "best": best}
