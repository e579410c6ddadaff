"""The peers' side of the `equal_budget` suite, run by a peer's own bench environment's python
(bench/.venv-flaml, bench/.venv-autogluon), never the project's:

    python bench/peer_runner.py --peer flaml|autogluon --train train.parquet --test test.parquet \
        --label y --task binary|multiclass|regression --time-limit 30 --out result.json

Fits the peer with its own defaults and the given time limit (FLAML: AutoML.fit(time_budget=...);
AutoGluon: TabularPredictor.fit(time_limit=...)), predicts the test rows and writes the predictions'
score (ROC AUC, accuracy or RMSE, computed here the same way for both) and timings as JSON. It imports
nothing of the project.
"""

from __future__ import annotations

import argparse
import json
import time
from importlib import metadata


def score(task: str, y, predictions) -> float:
    import numpy as np
    from sklearn.metrics import accuracy_score, mean_squared_error, roc_auc_score

    if task == "binary":
        return float(roc_auc_score(y, predictions))
    if task == "multiclass":
        return float(accuracy_score(y, predictions))
    return float(np.sqrt(mean_squared_error(y, predictions)))


def flaml(train, test, label: str, task: str, limit: float):
    from flaml import AutoML

    metric = {"binary": "roc_auc", "multiclass": "accuracy", "regression": "rmse"}[task]
    automl = AutoML()
    automl.fit(train.drop(columns=[label]), train[label], task="classification" if task != "regression" else
               "regression", metric=metric, time_budget=limit, verbose=0, seed=0)
    X = test.drop(columns=[label])
    predictions = automl.predict_proba(X)[:, 1] if task == "binary" else automl.predict(X)
    return predictions, {"best_estimator": automl.best_estimator, "best_config": automl.best_config}


def autogluon(train, test, label: str, task: str, limit: float, path: str):
    from autogluon.tabular import TabularPredictor

    metric = {"binary": "roc_auc", "multiclass": "accuracy", "regression": "root_mean_squared_error"}[task]
    predictor = TabularPredictor(label=label, eval_metric=metric, problem_type=task, path=path, verbosity=0)
    predictor.fit(train, time_limit=limit)
    X = test.drop(columns=[label])
    predictions = predictor.predict_proba(X).iloc[:, 1] if task == "binary" else predictor.predict(X)
    return predictions, {"model_best": predictor.model_best, "models": predictor.model_names()}


def main() -> None:
    p = argparse.ArgumentParser()
    for arg in ("--peer", "--train", "--test", "--label", "--task", "--out"):
        p.add_argument(arg, required=True)
    p.add_argument("--time-limit", type=float, required=True)
    p.add_argument("--path", default="peer-models")
    args = p.parse_args()
    t0 = time.perf_counter()
    import pandas as pd

    train, test = pd.read_parquet(args.train), pd.read_parquet(args.test)
    if args.peer == "flaml":
        predictions, about = flaml(train, test, args.label, args.task, args.time_limit)
        dist = "flaml"
    else:
        predictions, about = autogluon(train, test, args.label, args.task, args.time_limit, args.path)
        dist = "autogluon.tabular"
    seconds = time.perf_counter() - t0
    out = {"peer": args.peer, "version": metadata.version(dist), "score_test": score(args.task, test[args.label],
                                                                                       predictions),
           "seconds_in_runner": seconds, "about": about, "train_rows": len(train), "test_rows": len(test)}
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
