"""AutoGluon's side of the `autogluon` suite, run by bench/.venv-autogluon's python (not the project's).

    python bench/autogluon_runner.py --train train.parquet --test test.parquet --label y --folds 5 \
        --stack-levels 0 --models GBM,XGB,NN_TORCH --path DIR --out result.json

Fits a bag of each model (on --stack-levels levels, without dynamic stacking) and a weighted ensemble (no
time limit), scores every model on
the test rows, and writes timings, scores and versions as JSON. It imports nothing of the project.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from importlib import metadata


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--train", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--folds", type=int, required=True)
    p.add_argument("--stack-levels", type=int, default=0)
    p.add_argument("--models", default="GBM,XGB,NN_TORCH")
    p.add_argument("--hyperparameters", default="{}", help="JSON: model key -> its hyperparameters")
    p.add_argument("--path", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()

    t0 = time.perf_counter()
    import pandas as pd
    from autogluon.tabular import TabularPredictor

    import_seconds = time.perf_counter() - t0
    train = pd.read_parquet(args.train)
    test = pd.read_parquet(args.test)
    given = json.loads(args.hyperparameters)
    models = [m for m in args.models.split(",") if m]
    skipped = {}
    if "NN_TORCH" in models:
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            models.remove("NN_TORCH")
            skipped["NN_TORCH"] = f"torch cannot be imported ({exc})"
    hyperparameters = {m: given.get(m, {}) for m in models}

    t0 = time.perf_counter()
    predictor = TabularPredictor(label=args.label, eval_metric="roc_auc", path=args.path, verbosity=0).fit(
        train, num_bag_folds=args.folds, num_stack_levels=args.stack_levels, dynamic_stacking=False,
        hyperparameters=hyperparameters, fit_weighted_ensemble=True,
    )
    fit_seconds = time.perf_counter() - t0
    board = predictor.leaderboard(test, silent=True)
    fit_and_score_seconds = time.perf_counter() - t0

    rows = [
        {"model": r["model"], "score_test": float(r["score_test"]), "score_val": float(r["score_val"]),
         "fit_time": float(r["fit_time"])}
        for _, r in board.iterrows()
    ]
    singles = [r for r in rows if not r["model"].startswith("WeightedEnsemble")]
    # the ensemble AutoGluon predicts with (with stack levels, the weighted ensemble of the last level)
    ensembles = sorted((r for r in rows if r["model"].startswith("WeightedEnsemble")),
                       key=lambda r: r["model"] != predictor.model_best)
    failures = {}
    try:
        failed = predictor.model_failures()
        for _, r in failed.iterrows():
            failures[str(r.get("model"))] = str(r.get("exception", ""))[:500]
    except Exception:  # older versions have no model_failures()
        pass
    versions = {}
    for dist in ("autogluon.tabular", "autogluon.core", "lightgbm", "xgboost", "xgboost-cpu", "torch", "ray",
                 "pandas", "numpy", "scikit-learn"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    out = {
        "import_seconds": import_seconds,
        "fit_seconds": fit_seconds,
        "fit_and_score_seconds": fit_and_score_seconds,
        "models_requested": args.models.split(","),
        "models_fitted": [r["model"] for r in rows],
        "skipped": skipped,
        "failures": failures,
        "leaderboard": rows,
        "best_single": max(singles, key=lambda r: r["score_val"]) if singles else None,
        "ensemble": ensembles[0] if ensembles else None,
        "train_rows": len(train),
        "test_rows": len(test),
        "cpu_count": os.cpu_count(),
        "versions": versions,
    }
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
