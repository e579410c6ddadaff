"""The plain twins of the scale suite, each a whole process: read the Parquet file with pandas, split it
64/16/20 with the engine's seeded splitter (the same rows), train with the engine's parameters, threads,
seed and early stopping, and score the test rows.

`python -m bench.plain_scale MODEL PATH [--label label] [--rounds N] [--epochs N] [--batch-size N]` prints
one JSON line: the test ROC AUC, the rounds or epochs kept and the seconds of the test predictions. MODEL
is lightgbm, xgboost or nn; the parameters are those of conf/model/MODEL.yaml with the values given.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from bench.plain import XGB_TRAIN_ARGS, zeros_to_nan

CONF = Path(__file__).resolve().parents[1] / "conf" / "model"


def engine_params(model: str, rounds: int | None = None, epochs: int | None = None,
                  batch_size: int | None = None) -> dict:
    """The parameters of conf/model/MODEL.yaml, with the fixed rounds (GBMs) or epochs and batch size
    (network)."""
    import yaml

    params = yaml.safe_load((CONF / f"{model}.yaml").read_text())[model]["params"]
    if rounds is not None:
        params["num_iterations" if model == "lightgbm" else "num_boost_round"] = rounds
    if epochs is not None:
        params.update(max_epochs=epochs, patience=0)
    if batch_size is not None:
        params["batch_size"] = batch_size
    return params


def split(y: np.ndarray, test_size: float = 0.2, val_size: float = 0.2, seed: int = 0):
    """Train, validation and test rows as the engine splits a file (pipeline.data._split), stratified."""
    from pipeline import split as engine_split

    rows = np.arange(len(y))
    rest, test = engine_split.holdout(rows, test_size, seed, y)
    train, val = engine_split.holdout(rest, val_size, (seed, 1), y[rest])
    return train, val, test


def read(path: str, label: str):
    import pandas as pd

    frame = pd.read_parquet(path)
    y = frame.pop(label).to_numpy()
    return frame, y


def _roc_auc(y, p) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, p))


def lightgbm(path: str, label: str, params: dict, seed: int, threads: int) -> dict:
    import lightgbm as lgb

    X, y = read(path, label)
    tr, va, te = split(y)
    p = {"objective": "binary", "verbosity": -1, **params, "num_threads": threads}
    p.setdefault("seed", seed)
    train = lgb.Dataset(X.iloc[tr], y[tr], free_raw_data=True)
    valid = lgb.Dataset(X.iloc[va], y[va], reference=train)
    booster = lgb.train(p, train, valid_sets=[valid], valid_names=["valid"])
    best = booster.best_iteration or booster.current_iteration()
    t0 = time.perf_counter()
    pred = booster.predict(X.iloc[te], num_iteration=best)
    seconds = time.perf_counter() - t0
    return {"test_roc_auc": _roc_auc(y[te], pred), "rounds": int(best), "test_predict_seconds": seconds}


def xgboost(path: str, label: str, params: dict, seed: int, threads: int) -> dict:
    import xgboost as xgb

    X, y = read(path, label)
    if params.get("zero_as_missing"):
        X = zeros_to_nan(X)
    tr, va, te = split(y)
    p = {k: v for k, v in params.items() if k not in XGB_TRAIN_ARGS}
    p.update(objective="binary:logistic", nthread=threads)
    p.setdefault("seed", seed)
    train = xgb.DMatrix(X.iloc[tr], label=y[tr], nthread=threads)
    valid = xgb.DMatrix(X.iloc[va], label=y[va], nthread=threads)
    booster = xgb.train(p, train, num_boost_round=int(params["num_boost_round"]), evals=[(valid, "valid")],
                        early_stopping_rounds=params.get("early_stopping_rounds"), verbose_eval=False)
    best = booster.best_iteration
    t0 = time.perf_counter()
    pred = booster.predict(xgb.DMatrix(X.iloc[te], nthread=threads), iteration_range=(0, best + 1))
    seconds = time.perf_counter() - t0
    return {"test_roc_auc": _roc_auc(y[te], pred), "rounds": int(best) + 1, "test_predict_seconds": seconds}


def nn(path: str, label: str, params: dict, seed: int, threads: int) -> dict:
    """The engine's network (pipeline.nn.network.TabularMLP) trained by a plain loop over tensors of the
    standardized rows: a shuffled permutation per epoch, AdamW (fused, as the engine's), cross-entropy;
    the epoch with the best validation AUC is kept and scores the test rows."""
    import copy

    import torch
    from torch.nn import functional as F

    from pipeline.nn.network import TabularMLP

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    X, y = read(path, label)
    tr, va, te = split(y)
    num = X.to_numpy(dtype=np.float32)
    train = num[tr]
    mean, std = train.mean(axis=0), train.std(axis=0)
    std[std <= 1e-12] = 1.0

    def tensors(rows, values=None):
        values = num[rows] if values is None else values
        values -= mean
        values /= std
        return torch.from_numpy(values), torch.as_tensor(y[rows], dtype=torch.long)

    x_train, y_train = tensors(tr, train)
    x_val, _ = tensors(va)
    no_codes = torch.empty((0, 0), dtype=torch.long)
    model = TabularMLP(num.shape[1], [], 2, tuple(params["hidden_sizes"]), float(params["dropout"]),
                       int(params["max_embedding_dim"]))
    opt = torch.optim.AdamW(model.parameters(), lr=float(params["learning_rate"]),
                            weight_decay=float(params["weight_decay"]), fused=True)
    batch = int(params["batch_size"])
    generator = torch.Generator().manual_seed(seed)

    def proba(x):
        model.eval()
        with torch.no_grad():
            out = torch.cat([model(x[i:i + 65_536], no_codes) for i in range(0, len(x), 65_536)])
        model.train()
        return torch.softmax(out, dim=1)[:, 1].numpy()

    best_auc, best_state, best_epoch = -np.inf, None, -1
    for epoch in range(int(params["max_epochs"])):
        model.train()
        perm = torch.randperm(len(y_train), generator=generator)
        for start in range(0, len(perm), batch):
            idx = perm[start:start + batch]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x_train[idx], no_codes), y_train[idx])
            loss.backward()
            opt.step()
        auc = _roc_auc(y[va], proba(x_val))
        if auc > best_auc:
            best_auc, best_state, best_epoch = auc, copy.deepcopy(model.state_dict()), epoch
    model.load_state_dict(best_state)
    t0 = time.perf_counter()
    x_test, _ = tensors(te)
    pred = proba(x_test)
    seconds = time.perf_counter() - t0
    return {"test_roc_auc": _roc_auc(y[te], pred), "epochs": best_epoch + 1, "test_predict_seconds": seconds}


MODELS = {"lightgbm": lightgbm, "xgboost": xgboost, "nn": nn}


def task_seed(seed: int, model: str) -> int:
    """The seed the engine gives trial 0, fold 0 of `model` (pipeline.graph.tasks.task_seed), computed here so
    that the plain process imports nothing of the engine but its splitter; equal test scores confirm it."""
    import hashlib

    digest = hashlib.sha256(f"{seed}/{model}/0/0".encode()).digest()
    return int.from_bytes(digest[:4], "little") % (2**31 - 1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.plain_scale", description=__doc__.split("\n\n")[0])
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("path")
    p.add_argument("--label", default="label")
    p.add_argument("--rounds", type=int, default=None, help="boosting rounds (GBMs)")
    p.add_argument("--epochs", type=int, default=None, help="epochs (network), without early stopping")
    p.add_argument("--batch-size", type=int, default=None, help="rows per batch (network)")
    p.add_argument("--seed", type=int, default=0, help="the engine's seed")
    args = p.parse_args(argv)
    params = engine_params(args.model, args.rounds, args.epochs, args.batch_size)
    threads = len(os.sched_getaffinity(0))
    out = MODELS[args.model](args.path, args.label, params, task_seed(args.seed, args.model), threads)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
