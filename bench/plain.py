"""The plain scripts the engine is compared with: `lgb.train`, `xgb.train` and a DataLoader loop.

Each starts from the engine's loaded data (typed frame, encoded labels, train/val/test indices)
and ends at the test ROC AUC. The GBM scripts pass exactly what pipeline/models/lightgbm.py and
xgboost.py pass, so their scores must equal the engine's.
"""

from __future__ import annotations

import copy

import numpy as np

XGB_TRAIN_ARGS = ("num_boost_round", "early_stopping_rounds", "zero_as_missing")


def zeros_to_nan(X):
    """What the engine's zero_as_missing does, as a script would write it: numeric zeros as NaN (float32)."""
    numeric = [c for c in X.columns if X[c].dtype.kind in "iuf" and (X[c] == 0).any()]
    if not numeric:
        return X
    X = X.copy(deep=False)
    for c in numeric:
        X[c] = X[c].astype(np.float32).mask(X[c] == 0)
    return X


def _roc_auc(y, p) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, p))


def lightgbm(data, params: dict, *, seed: int, threads: int) -> dict:
    """lgb.train on the train rows, early stopping on the validation rows, the test AUC at the best iteration."""
    import lightgbm as lgb

    X, y = data.X, data.y
    tr, va, te = data.train_idx, data.val_idx, data.test_idx
    p = {"objective": "binary", "verbosity": -1, **params, "num_threads": threads}
    p.setdefault("seed", seed)
    train = lgb.Dataset(X.iloc[tr], y[tr], free_raw_data=True)
    valid = lgb.Dataset(X.iloc[va], y[va], reference=train)
    booster = lgb.train(p, train, valid_sets=[valid], valid_names=["valid"])
    best = booster.best_iteration or booster.current_iteration()
    pred = booster.predict(X.iloc[te], num_iteration=best)
    return {"test_roc_auc": _roc_auc(y[te], pred), "iterations": int(best)}


def xgboost(data, params: dict, *, seed: int, threads: int) -> dict:
    """xgb.train with native categories, early stopping on the validation rows, the test AUC at the best iteration."""
    import xgboost as xgb

    X, y = (zeros_to_nan(data.X) if params.get("zero_as_missing") else data.X), data.y
    tr, va, te = data.train_idx, data.val_idx, data.test_idx
    p = {k: v for k, v in params.items() if k not in XGB_TRAIN_ARGS}
    p.setdefault("objective", "binary:logistic")
    p.setdefault("tree_method", "hist")
    p["nthread"] = threads
    p.setdefault("seed", seed)
    train = xgb.DMatrix(X.iloc[tr], label=y[tr], enable_categorical=True, nthread=threads)
    valid = xgb.DMatrix(X.iloc[va], label=y[va], enable_categorical=True, nthread=threads)
    booster = xgb.train(
        p, train, num_boost_round=int(params.get("num_boost_round", 1000)), evals=[(valid, "valid")],
        early_stopping_rounds=params.get("early_stopping_rounds"), verbose_eval=False,
    )
    best = getattr(booster, "best_iteration", booster.num_boosted_rounds() - 1)
    pred = booster.predict(xgb.DMatrix(X.iloc[te], enable_categorical=True), iteration_range=(0, best + 1))
    return {"test_roc_auc": _roc_auc(y[te], pred), "iterations": int(best) + 1}


def encode(data):
    """Numbers: train-row median for missing values, then standardized; categories: pandas codes + 1."""
    import pandas as pd

    X = data.X
    numeric = [c for c in X.columns if not isinstance(X[c].dtype, pd.CategoricalDtype)]
    categorical = [c for c in X.columns if isinstance(X[c].dtype, pd.CategoricalDtype)]
    num = X[numeric].to_numpy(dtype=np.float32, na_value=np.nan) if numeric else np.empty((len(X), 0), np.float32)
    tr = num[data.train_idx]
    with np.errstate(all="ignore"):
        median = np.nan_to_num(np.nanmedian(tr, axis=0)) if num.size else np.empty(0)
        num = np.where(np.isnan(num), median, num)
        mean, std = num[data.train_idx].mean(axis=0), num[data.train_idx].std(axis=0)
    num = ((num - mean) / np.where(std > 1e-12, std, 1.0)).astype(np.float32)
    cat = np.stack([X[c].cat.codes.to_numpy().astype(np.int64) + 1 for c in categorical], axis=1) if categorical \
        else np.empty((len(X), 0), np.int64)
    cards = [len(X[c].cat.categories) + 1 for c in categorical]
    return num, cat, cards


def torch_mlp(data, params: dict, *, seed: int, threads: int, device: str = "cpu") -> dict:
    """The same TabularMLP trained by a DataLoader loop (AdamW, cross-entropy); the epoch with the best
    validation AUC is kept and scored on the test rows."""
    import torch
    from torch.nn import functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from pipeline.nn.network import TabularMLP

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    num, cat, cards = encode(data)
    xn, xc, y = torch.from_numpy(num), torch.from_numpy(cat), torch.as_tensor(data.y, dtype=torch.long)
    tr, va, te = (torch.as_tensor(i) for i in (data.train_idx, data.val_idx, data.test_idx))
    model = TabularMLP(num.shape[1], cards, 2, tuple(params["hidden_sizes"]), float(params["dropout"]),
                       int(params["max_embedding_dim"])).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=float(params["learning_rate"]),
                            weight_decay=float(params["weight_decay"]))
    loader = DataLoader(TensorDataset(xn[tr], xc[tr], y[tr]), batch_size=int(params["batch_size"]), shuffle=True)

    def proba(idx):
        model.eval()
        with torch.no_grad():
            out = model(xn[idx].to(device), xc[idx].to(device))
        model.train()
        return torch.softmax(out.float(), dim=1)[:, 1].cpu().numpy()

    best_auc, best_state = -np.inf, None
    for _ in range(int(params["max_epochs"])):
        model.train()
        for xb, cb, yb in loader:
            xb, cb, yb = xb.to(device), cb.to(device), yb.to(device)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb, cb).float(), yb)
            loss.backward()
            opt.step()
        auc = _roc_auc(data.y[data.val_idx], proba(va))
        if auc > best_auc:
            best_auc, best_state = auc, copy.deepcopy(model.state_dict())
    model.load_state_dict(best_state)
    return {"test_roc_auc": _roc_auc(data.y[data.test_idx], proba(te)), "val_roc_auc": best_auc}


def main(argv=None) -> int:
    """`python -m bench.plain [--max-rows N]`: the plain LightGBM script as a whole process on the bundled
    Adult data (the engine's loader and split), with the engine's parameters, seed and thread count; prints
    the test ROC AUC as JSON."""
    import argparse
    import json
    import os
    from pathlib import Path

    import yaml

    from pipeline.config import DataConf
    from pipeline.data import load
    from pipeline.graph.tasks import task_seed

    p = argparse.ArgumentParser(prog="python -m bench.plain")
    p.add_argument("--max-rows", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    conf = Path(__file__).resolve().parents[1] / "conf" / "model" / "lightgbm.yaml"
    params = yaml.safe_load(conf.read_text())["lightgbm"]["params"]
    data = load(DataConf(max_rows=args.max_rows), Path.cwd())
    out = lightgbm(data, params, seed=task_seed(args.seed, "lightgbm", 0, 0), threads=len(os.sched_getaffinity(0)))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
