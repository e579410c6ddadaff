"""k-fold LightGBM bags on Adult with one CPU per fit: one fit at a time vs as many as the cores allow."""

from __future__ import annotations

from bench.common import (
    Engine,
    Options,
    cpu_cores,
    figure,
    fit_makespan,
    leaderboard_scores,
    load_data,
    log,
    ratios,
    timed,
)


def run(opts: Options) -> dict:
    cores = cpu_cores()
    # k = cores: one fold per worker (a 2-fold bag on 2 cores); k = 2 x cores: every worker gets two.
    # Either way each worker gets the same number of folds, so the ideal speed-up is the core count.
    fold_counts = sorted({cores, 2 * cores})
    data_ov = ["data=adult"] + (["data.max_rows=5000"] if opts.quick else [])
    engine = Engine(opts.scratch)
    data, _ = load_data(data_ov, opts.scratch / "engine")
    engine.clean(engine.run(data_ov + ["model=lightgbm", "tracking=none", "model.lightgbm.params.num_iterations=10"],
                            data))  # warm-up, not timed
    n = opts.n(3, 2)
    figures, settings = [], {"cores": cores, "fit_num_cpus": 1, "repeats": n, "ideal_speedup": cores,
                             "fitting_processes_per_run": {}, "variants": {}}
    for k in fold_counts:
        base = data_ov + ["model=lightgbm", "tracking=none", "hpo=none", "parallelism=default",
                          f"parallelism.num_folds={k}", "parallelism.fit.num_cpus=1"]
        if opts.quick:
            base.append("model.lightgbm.params.num_iterations=100")
        variants = {"sequential": base + ["parallelism.sequential=true"], "parallel": base}
        figures += _measure(opts, engine, data, variants, k, cores, n, settings)
    settings["timer"] = (
        "pipeline.run.run in this process from loaded data to the leaderboard (tracking=none); "
        "the sequential plan fits in the driver, the parallel plan in worker processes forked from "
        "the executor's forkserver (started once per process, so repeats after the first find it "
        "running); the data hand-over is inside the timer. The CLI figures time `python -m pipeline ...` as a "
        "subprocess from start to exit, where the workers start while the driver loads the data"
    )
    return {
        "settings": settings,
        "figures": figures,
        "notes": [f"The ideal speed-up on this machine is {cores}x ({cores} fits at a time, one CPU each); "
                  f"bags of {' and '.join(map(str, fold_counts))} folds."],
    }


def _measure(opts: Options, engine: Engine, data, variants: dict, k: int, cores: int, n: int, settings: dict) -> list:
    wall = {v: [] for v in variants}
    fits = {v: [] for v in variants}
    workers = {v: 0 for v in variants}
    scores = {v: [] for v in variants}
    for r in range(n):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            log(f"parallel_folds: {k} folds, {name} {r + 1}/{n}")
            res = engine.run(variants[name], data)
            wall[name].append(res.seconds)
            fits[name].append(fit_makespan(res.timeline))
            workers[name] = max(workers[name], len({e["pid"] for e in res.timeline}))
            scores[name].append(leaderboard_scores(res.leaderboard)["lightgbm"]["test"])
            engine.clean(res)
    cli = _cli_walls(opts, variants, n)
    group = f"Adult · LightGBM · {k} folds"
    settings["fitting_processes_per_run"][f"{k} folds"] = workers
    settings["variants"][f"{k} folds"] = {v: " ".join(args) for v, args in variants.items()}
    speedup = ratios(wall["sequential"], wall["parallel"])
    cli_speedup = ratios(cli["sequential"], cli["parallel"])
    fit_speedup = ratios(fits["sequential"], fits["parallel"])
    return [
        figure("sequential seconds", wall["sequential"], "s", group=group),
        figure("parallel seconds", wall["parallel"], "s", group=group),
        figure("speed-up (wall)", speedup, "x", group=group, ideal=float(cores)),
        figure("efficiency (wall speed-up / cores)", [s / cores for s in speedup], "fraction", group=group),
        figure("speed-up (fit phase: first fit start to last fit end)", fit_speedup, "x", group=group,
               ideal=float(cores)),
        figure("CLI sequential seconds", cli["sequential"], "s", group=group),
        figure("CLI parallel seconds", cli["parallel"], "s", group=group),
        figure("speed-up (CLI, as a user runs it)", cli_speedup, "x", group=group, ideal=float(cores)),
        figure("sequential test ROC AUC", scores["sequential"], "roc_auc", group=group, kind="score"),
        figure("parallel test ROC AUC", scores["parallel"], "roc_auc", group=group, kind="score",
               identical=scores["parallel"] == scores["sequential"], compared_with="the sequential run's"),
    ]


def _cli_walls(opts: Options, variants: dict, n: int) -> dict:
    """Wall seconds of `python -m pipeline <variant>` as a fresh subprocess, alternating the order."""
    import os
    import subprocess
    import sys

    cwd = opts.scratch / "parallel_cli"
    cwd.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COLUMNS": "200"}
    out = {v: [] for v in variants}
    for r in range(n):
        for name in (list(variants) if r % 2 == 0 else list(reversed(variants))):
            log(f"parallel_folds: CLI {name} {r + 1}/{n}")
            cmd = [sys.executable, "-m", "pipeline", *variants[name]]
            seconds, proc = timed(lambda: subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                                                         timeout=600))
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd[2:])} exited {proc.returncode}: {proc.stderr[-2000:]}")
            out[name].append(seconds)
    return out
