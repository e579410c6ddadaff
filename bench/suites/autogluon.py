"""The engine (`model=all`, k-fold bags, weighted ensemble) against AutoGluon 1.6.3 (GBM, XGB, NN_TORCH
bagged k-fold, weighted ensemble) on Adult with the engine's own split: wall time and test ROC AUC."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    Engine,
    Options,
    figure,
    leaderboard_scores,
    load_data,
    log,
    not_measured,
    ratios,
)

HERE = Path(__file__).resolve().parents[1]
RUNNER = HERE / "autogluon_runner.py"
TARGET = (">=", 5.0)
MODELS = "GBM,XGB,NN_TORCH"
# --quick only: short fits on both sides, to check the plumbing.
QUICK_ENGINE = ["model.lightgbm.params.num_iterations=100", "model.xgboost.params.num_boost_round=100",
                "model.nn.params.max_epochs=3"]
QUICK_AG = {"GBM": {"num_boost_round": 100}, "XGB": {"n_estimators": 100}, "NN_TORCH": {"num_epochs": 3}}
FIGURES = ("speed-up: AutoGluon seconds / engine seconds", "engine seconds", "AutoGluon seconds",
           "engine best model test ROC AUC", "AutoGluon best model test ROC AUC",
           "engine ensemble test ROC AUC", "AutoGluon ensemble test ROC AUC",
           "ensemble test ROC AUC: engine minus AutoGluon")


STACKINGS = (0, 1)  # the engine's stack_levels = AutoGluon's num_stack_levels, one pairing each


def run(opts: Options) -> dict:
    k = 3 if opts.quick else 5  # a stack level needs parallelism.num_folds >= 3
    groups = [_group(k, levels) for levels in STACKINGS]
    python = opts.autogluon_python
    if not python.exists():
        reason = (f"the AutoGluon environment is missing ({python}); create it with bash bench/autogluon_env.sh")
        return {"status": "not measured", "reason": reason, "settings": {"num_folds": k},
                "figures": [not_measured(f, reason, group=g) for g in groups for f in FIGURES], "notes": []}
    data_ov = ["data=adult"] + (["data.max_rows=5000"] if opts.quick else [])
    folder = opts.scratch / "autogluon"
    folder.mkdir(parents=True, exist_ok=True)
    splits = [_split(data_ov, seed, opts.scratch, folder) for seed in range(opts.n(2, 1))]
    figures, notes, settings = [], [], {"num_folds": k, "pairings": {}}
    for levels in STACKINGS:
        engine_ov = data_ov + ["model=all", "tracking=none", "hpo=none", "parallelism=default",
                               f"parallelism.num_folds={k}", f"stack_levels={levels}"] + (QUICK_ENGINE if opts.quick else [])
        pairing = _pairing(opts, splits, engine_ov, python, folder, k, levels)
        figures += pairing.pop("figures")
        notes += pairing.pop("notes")
        settings["pairings"][_group(k, levels)] = pairing
    if opts.quick:
        notes.append("quick mode: both sides capped (100 boosting rounds, 3 network epochs) on 5,000 rows")
    data = splits[0].data
    settings["split"] = {"train+val (AutoGluon's training data; the engine's folds cover the same rows)":
                         int(len(data.train_idx) + len(data.val_idx)), "test": int(len(data.test_idx)),
                         "seeds": "repeat r splits the rows with seed r (data.seed=r) and seeds the engine's "
                                  "folds and models with it (seed=r); AutoGluon gets the same train and test rows"}
    settings["timers"] = {
        "engine": "pipeline.run.run in this process from loaded data to the leaderboard, tracking=none",
        "autogluon": "TabularPredictor(...).fit(...) plus leaderboard(test) inside the runner "
                     "(after importing AutoGluon and reading the Parquet files)",
    }
    return {"settings": settings, "figures": figures, "notes": notes}


def _group(k: int, levels: int) -> str:
    return f"Adult · {k}-fold bags" + (f" · {levels} stack level{'s' if levels > 1 else ''}" if levels else "")


def _pairing(opts: Options, splits: list[Split], engine_ov: list[str], python: Path, folder: Path, k: int,
             levels: int) -> dict:
    """The engine and AutoGluon, alternating, on the same rows with the same number of stack levels; one
    repeat per split (an AutoGluon run takes minutes on 2 cores)."""
    group = _group(k, levels)
    engine = Engine(opts.scratch)
    n = len(splits)
    e_sec, a_sec, runs, boards = [], [], [], []
    e_best, e_ens, a_best, a_ens = [], [], [], []
    for r, split in enumerate(splits):
        order = ("engine", "autogluon") if r % 2 == 0 else ("autogluon", "engine")
        for side in order:
            log(f"autogluon: {group}: {side} {r + 1}/{n}")
            if side == "engine":
                res = engine.run(engine_ov + split.overrides, split.data)
                e_sec.append(res.seconds)
                scores = leaderboard_scores(res.leaderboard)
                singles = {m: s for m, s in scores.items() if m != "ensemble"}
                best = max(singles, key=lambda m: singles[m]["val"])
                e_best.append(singles[best]["test"])
                e_ens.append(scores["ensemble"]["test"])
                boards.append({m: s["test"] for m, s in scores.items()} | {"best": best, "seed": split.seed})
                engine.clean(res)
            else:
                out = _autogluon(python, split.train, split.test, split.data.label, k, levels,
                                 folder / f"run{levels}_{r}", opts.quick)
                a_sec.append(out["fit_and_score_seconds"])
                a_best.append(out["best_single"]["score_test"])
                a_ens.append(out["ensemble"]["score_test"] if out["ensemble"] else float("nan"))
                runs.append(out)
    last = runs[-1]
    nn_fitted = any(m.startswith("NeuralNetTorch") for m in last["models_fitted"])
    figures = [
        figure(FIGURES[0], ratios(a_sec, e_sec), "x", group=group, target=TARGET),
        figure(FIGURES[1], e_sec, "s", group=group),
        figure(FIGURES[2], a_sec, "s", group=group),
        figure(FIGURES[3], e_best, "roc_auc", group=group, kind="score", model=boards[-1]["best"]),
        figure(FIGURES[4], a_best, "roc_auc", group=group, kind="score", model=last["best_single"]["model"]),
        figure(FIGURES[5], e_ens, "roc_auc", group=group, kind="score"),
        figure(FIGURES[6], a_ens, "roc_auc", group=group, kind="score", model=(last["ensemble"] or {}).get("model")),
        figure(FIGURES[7], [e - a for e, a in zip(e_ens, a_ens)], "roc_auc", group=group, kind="score",
               target=(">=", 0.0)),
    ]
    notes = []
    if not nn_fitted:
        why = last["skipped"].get("NN_TORCH") or last["failures"] or "it is missing from AutoGluon's leaderboard"
        notes.append(f"{group}: AutoGluon ran without NN_TORCH: {why}")
    return {
        "repeats": n,
        "engine": "python -m pipeline " + " ".join(engine_ov) + " data.seed=<r> seed=<r>",
        "autogluon": {
            "call": f"TabularPredictor(label, eval_metric='roc_auc', verbosity=0).fit(train+val rows, "
                    f"num_bag_folds={k}, num_stack_levels={levels}, dynamic_stacking=False, "
                    "hyperparameters={'GBM': {}, 'XGB': {}, 'NN_TORCH': {}}, fit_weighted_ensemble=True), "
                    "no time limit; its ensemble is the model it predicts with (model_best)",
            "hyperparameters": QUICK_AG if opts.quick else {m: {} for m in MODELS.split(",")},
            "versions": last["versions"],
            "nn_torch": nn_fitted,
            "models_fitted": last["models_fitted"],
            "failures": last["failures"],
            "import_seconds": [o["import_seconds"] for o in runs],
        },
        "leaderboards": {"engine_test": boards, "autogluon": [o["leaderboard"] for o in runs]},
        "figures": figures,
        "notes": notes,
    }


@dataclass
class Split:
    """One repeat's rows: the engine's loaded data, its seed overrides, and the Parquet files AutoGluon reads."""

    seed: int
    data: object
    overrides: list[str]
    train: Path
    test: Path


def _split(data_ov: list[str], seed: int, scratch: Path, folder: Path) -> Split:
    """The engine's split with seed `seed`, loaded once and written for AutoGluon: each repeat is a
    different train/test split (the same one for both sides), so the score figures vary as a user's would."""
    overrides = [f"data.seed={seed}", f"seed={seed}"]
    data, _ = load_data(data_ov + overrides, scratch / "engine")
    where = folder / f"seed{seed}"
    where.mkdir(parents=True, exist_ok=True)
    return Split(seed, data, overrides, *_write_split(data, where))


def _write_split(data, folder: Path) -> tuple[Path, Path]:
    """The engine's typed rows with the encoded label: train+val rows for AutoGluon to bag, test rows to score."""
    import numpy as np

    frame = data.X.copy()
    frame[data.label] = data.y
    train = frame.iloc[np.concatenate([data.train_idx, data.val_idx])].reset_index(drop=True)
    test = frame.iloc[data.test_idx].reset_index(drop=True)
    paths = folder / "train.parquet", folder / "test.parquet"
    train.to_parquet(paths[0])
    test.to_parquet(paths[1])
    return paths


def _autogluon(python: Path, train: Path, test: Path, label: str, k: int, levels: int, path: Path,
               quick: bool) -> dict:
    out = path.with_suffix(".json")
    cmd = [str(python), str(RUNNER), "--train", str(train), "--test", str(test), "--label", label,
           "--folds", str(k), "--stack-levels", str(levels), "--models", MODELS, "--path", str(path),
           "--out", str(out)]
    if quick:
        cmd += ["--hyperparameters", json.dumps(QUICK_AG)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the AutoGluon runner exited {proc.returncode}: {proc.stderr[-3000:]}")
    result = json.loads(out.read_text())
    shutil.rmtree(path, ignore_errors=True)
    return result
