"""The engine against plain scripts as the data grows: whole processes at 200k, 2M and 10M rows.

A Parquet file of N rows x 20 float32 features (scikit-learn's make_classification, seed 0) and a
`label` column; `python -m pipeline data=parquet ... model=M tracking=none` with fixed rounds or epochs
against `python -m bench.plain_scale M ...` (pandas reads the file, the engine's split, the library with
the engine's parameters, threads, seed and early stopping). Wall seconds, CPU seconds and peak resident
memory of each process (its own and its children's, from wait4 in bench.rusage), engine and plain
alternating within each repeat; the engine's memory estimate of its fit beside the peak it measured
(memory.json).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from bench.common import Options, cpu_cores, figure, guarded, log, ratios

SIZES = {"200k": 200_000, "2M": 2_000_000, "10M": 10_000_000}
QUICK_SIZES = {"20k": 20_000, "50k": 50_000}
FEATURES = 20
ROUNDS, EPOCHS = 300, 2
BATCH = 4096  # the network's batch as model=nn_gpu sets it: an epoch of 6.4M rows in minutes on 2 cores
# model -> (the engine's overrides, the plain twin's arguments): fixed rounds (early stopping as
# configured) or epochs (no early stopping)
MODELS = {
    "lightgbm": ([f"model.lightgbm.params.num_iterations={ROUNDS}"], ["--rounds", str(ROUNDS)]),
    "xgboost": ([f"model.xgboost.params.num_boost_round={ROUNDS}"], ["--rounds", str(ROUNDS)]),
    "nn": ([f"model.nn.params.max_epochs={EPOCHS}", "model.nn.params.patience=0",
            f"model.nn.params.batch_size={BATCH}", "model.nn.params.batch_size_by_rows=false"],
           ["--epochs", str(EPOCHS), "--batch-size", str(BATCH)]),
}
TARGETS = {"wall": ("<=", 1.02), "rss": ("<=", 1.05), "estimate": ("between", (0.85, 1.15))}
FIGURES = ("engine / plain wall", "engine / plain peak RSS", "memory estimate / peak")
TIMEOUT_S = 3600


@dataclass(frozen=True)
class Measured:
    """One whole process: wall and CPU seconds, peak resident memory (bytes) of it and its children."""

    wall: float
    cpu: float
    peak_rss: int
    output: str


def measure(cmd: list[str], cwd: Path, env: dict, log_path: Path) -> Measured:
    """Run `cmd` to its end under bench.rusage (a small parent, so that the peak is the command's own)."""
    usage_path = log_path.with_suffix(".rusage.json")
    with open(log_path, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "bench.rusage", str(usage_path), "--", *cmd], cwd=cwd,
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    output = log_path.read_text()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:])} exited {proc.returncode}: {output[-2000:]}")
    usage = json.loads(usage_path.read_text())
    return Measured(usage["wall_s"], usage["cpu_s"], usage["peak_rss_bytes"], output)


def write_table(path: Path, rows: int) -> None:
    """N rows x 20 float32 features from make_classification (seed 0) and an integer `label` column."""
    import numpy as np
    import pandas as pd
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=rows, n_features=FEATURES, random_state=0)
    frame = pd.DataFrame(X.astype(np.float32), columns=[f"x{i}" for i in range(FEATURES)])
    del X
    frame["label"] = y
    frame.to_parquet(path, index=False)


class Sides:
    """The two commands of a comparison, run in a scratch folder, their outputs kept beside it."""

    def __init__(self, cwd: Path):
        self.cwd, self.count = cwd, 0
        self.env = {**os.environ, "COLUMNS": "200"}

    def engine(self, model: str, path: Path) -> tuple[Measured, dict]:
        self.count += 1
        run_dir = self.cwd / "runs" / f"{self.count:04d}"
        cmd = [sys.executable, "-m", "pipeline", "data=parquet", f"data.path={path}", "data.label=label",
               f"model={model}", *MODELS[model][0], "tracking=none", f"hydra.run.dir={run_dir}"]
        m = measure(cmd, self.cwd, self.env, self.cwd / f"engine-{self.count:04d}.log")
        return m, engine_result(run_dir, model)

    def plain(self, model: str, path: Path) -> tuple[Measured, dict]:
        self.count += 1
        cmd = [sys.executable, "-m", "bench.plain_scale", model, str(path), *MODELS[model][1]]
        m = measure(cmd, self.cwd, self.env, self.cwd / f"plain-{self.count:04d}.log")
        return m, json.loads(m.output.strip().splitlines()[-1])


def engine_result(run_dir: Path, model: str) -> dict:
    """The engine's test score, its leaderboard's test throughput and its memory record (memory.json)."""
    import pandas as pd

    board = pd.read_csv(run_dir / "leaderboard.csv")
    row = board.loc[board.model == model].iloc[0]
    memory = next(r for r in json.loads((run_dir / "memory.json").read_text()) if r["model"] == model)
    return {"test_roc_auc": float(row["test_roc_auc"]), "predict_rows_per_s": float(row["predict_rows_per_s"]),
            "estimate_mb": memory["estimate_ram_mb"], "peak_mb": memory["peak_ram_mb"]}


def run(opts: Options, models: tuple[str, ...] = tuple(MODELS)) -> dict:
    if opts.sizes:
        sizes = {label: SIZES[label] for label in opts.sizes}
    else:
        sizes = QUICK_SIZES if opts.quick else SIZES
    cwd = opts.scratch / "scale"
    cwd.mkdir(parents=True, exist_ok=True)
    n = opts.n(3, 2)
    sides = Sides(cwd)
    loads = {"start": os.getloadavg()}
    figures = []
    smallest = min(sizes.values())
    for label, rows in sorted(sizes.items(), key=lambda kv: kv[1]):
        path = cwd / f"{label}.parquet"
        log(f"scale: writing {rows:,} rows to {path}")
        write_table(path, rows)
        for model in models:
            group = f"{model} · {label} rows"
            warm_up = rows == smallest
            figures += guarded(group, FIGURES, lambda: _compare(sides, model, path, group, n, warm_up))
            loads[group] = os.getloadavg()
        path.unlink()
    return {
        "settings": {
            "repeats": n, "cores": cpu_cores(), "rows": sizes, "features": f"{FEATURES} float32",
            "rounds": ROUNDS, "epochs": EPOCHS, "network_batch_size": BATCH,
            "engine": "python -m pipeline data=parquet data.path=FILE data.label=label model=M tracking=none, with "
                      + "; ".join(f"{m}: {' '.join(MODELS[m][0])}" for m in models),
            "plain": "python -m bench.plain_scale M FILE: pandas reads the file, the engine's split (64/16/20), "
                     "lgb.train / xgb.train with the engine's parameters, threads, seed and early stopping on the "
                     "validation rows, or the engine's network in a plain torch loop (standardized inputs, a "
                     "shuffled permutation per epoch, the best validation epoch kept); test predictions",
            "measured": "wall seconds start to exit, CPU seconds and peak resident memory (ru_maxrss) of the "
                        "process and its children, from wait4; engine and plain alternate within each repeat "
                        "(order rotating); one untimed run of each side per model at the smallest size first",
            "estimate": "memory.json of the engine's run: the plan's estimate of one fit against the peak the fit "
                        "measured (VmHWM from the fit's start)",
            "load_average_1_5_15_min": {k: [round(x, 2) for x in v]
                                        for k, v in {**loads, "end": os.getloadavg()}.items()},
        },
        "figures": figures,
        "notes": ["Timings on a shared machine are noisy: the ratios pair the two sides of each repeat, and the "
                  "load averages are in the settings."],
    }


def _compare(sides: Sides, model: str, path: Path, group: str, n: int, warm_up: bool) -> list[dict]:
    if warm_up:  # the file cache, XGBoost's parameter cache, the libraries' first import: untimed
        sides.engine(model, path)
        sides.plain(model, path)
    runs: dict[str, list] = {"engine": [], "plain": []}
    for r in range(n):
        for side in ("engine", "plain") if r % 2 == 0 else ("plain", "engine"):
            log(f"scale: {group} {side} {r + 1}/{n}")
            runs[side].append(getattr(sides, side)(model, path))
    (e, er), (p, pr) = zip(*runs["engine"]), zip(*runs["plain"])
    mib = 2**20
    test_rows = _test_rows(path)
    e_predict = [test_rows / x["predict_rows_per_s"] for x in er]
    p_predict = [x["test_predict_seconds"] for x in pr]
    e_auc, p_auc = [x["test_roc_auc"] for x in er], [x["test_roc_auc"] for x in pr]
    same = all(abs(a - b) < 1e-12 for a, b in zip(e_auc, p_auc))  # the same model, summed in another order
    scores = {"identical": same, "compared_with": "the plain script's (to 1e-12)"} if model != "nn" else {}
    return [
        figure("engine / plain wall", ratios([m.wall for m in e], [m.wall for m in p]), "ratio", group=group,
               target=TARGETS["wall"]),
        figure("engine / plain peak RSS", ratios([m.peak_rss for m in e], [m.peak_rss for m in p]), "ratio",
               group=group, target=TARGETS["rss"]),
        figure("memory estimate / peak", [x["estimate_mb"] / x["peak_mb"] for x in er], "ratio", group=group,
               target=TARGETS["estimate"]),
        figure("engine / plain CPU seconds", ratios([m.cpu for m in e], [m.cpu for m in p]), "ratio", group=group),
        figure("engine seconds", [m.wall for m in e], "s", group=group),
        figure("plain seconds", [m.wall for m in p], "s", group=group),
        figure("engine peak RSS", [m.peak_rss / mib for m in e], "MiB", group=group),
        figure("plain peak RSS", [m.peak_rss / mib for m in p], "MiB", group=group),
        figure("engine memory estimate", [x["estimate_mb"] for x in er], "MiB", group=group),
        figure("engine fit peak (memory.json)", [x["peak_mb"] for x in er], "MiB", group=group),
        figure("engine test prediction seconds (leaderboard)", e_predict, "s", group=group),
        figure("plain test prediction seconds", p_predict, "s", group=group),
        figure("engine test ROC AUC", e_auc, "roc_auc", group=group, kind="score"),
        figure("plain test ROC AUC", p_auc, "roc_auc", group=group, kind="score", **scores),
    ]


def _test_rows(path: Path) -> int:
    """Rows of the engine's test split of this file (20%, rounded up as the engine rounds)."""
    import math

    import pyarrow.parquet as pq

    return math.ceil(0.2 * pq.read_metadata(path).num_rows)
