"""The engine against plain `lgb.train` / `xgb.train` / a DataLoader torch loop on the same data,
parameters, seed and split: wall-time ratio and test scores side by side."""

from __future__ import annotations

from bench import plain
from bench.common import (
    Engine,
    Options,
    cpu_cores,
    figure,
    guarded,
    leaderboard_scores,
    load_data,
    log,
    not_measured,
    ratios,
    timed,
)

TARGET = ("<=", 1.10)
MODELS = ("lightgbm", "xgboost", "nn")
FIGURES = ("time ratio engine/plain", "engine seconds", "engine model.fit seconds", "plain seconds",
           "engine test ROC AUC", "plain test ROC AUC")

# Boosting rounds and network epochs per data set (the same cap on both sides); None keeps the
# engine's default (1000 rounds with early stopping after 50 without improvement).
FULL = {
    "adult": {"rows": None, "rounds": None, "epochs": 10, "repeats": 5},
    "bio_train": {"rows": None, "rounds": 300, "epochs": 4, "repeats": 3},
    "synthetic": {"rows": 1_000_000, "rounds": 150, "epochs": 2, "repeats": 3},
}
QUICK = {
    "adult": {"rows": 5_000, "rounds": 50, "epochs": 2, "repeats": 2},
    "bio_train": {"rows": 10_000, "rounds": 50, "epochs": 2, "repeats": 2},
    "synthetic": {"rows": 20_000, "rounds": 50, "epochs": 2, "repeats": 2},
}

INSIDE_ENGINE = (
    "pipeline.run.run(cfg, Runtime(...)) in this process, with the data already loaded: settings, plan, "
    "the fit (in the driver: one fit covers the machine), validation and test predictions (the validation "
    "predictions feed the leaderboard and the ensemble; the plain script predicts only the test rows), "
    "leaderboard, run-directory artifacts (plan.json, result pickle, leaderboard.csv, timeline.json; the plots "
    "are drawn only when a tracker logs them); tracking=none. Hydra composition and data loading are outside "
    "the timer."
)
INSIDE_PLAIN = {
    "lightgbm": "lgb.Dataset of train and validation rows, lgb.train with early stopping on validation, "
                "predict the test rows at the best iteration, roc_auc_score.",
    "xgboost": "xgb.DMatrix of train and validation rows (native categories), xgb.train with early stopping on "
               "validation, DMatrix and predict of the test rows at the best iteration, roc_auc_score.",
    "nn": "standardize numbers and take category codes, TensorDataset + DataLoader(shuffle=True), the same "
          "TabularMLP with AdamW, validation AUC each epoch (best epoch kept), test AUC.",
}


def data_overrides(name: str, spec: dict, opts: Options) -> list[str]:
    if name == "adult":
        out = ["data=adult"]
    elif name == "bio_train":
        out = ["data=parquet", f"data.path={opts.bio_train}", "data.label=target",
               "data.drop_columns=[EXAMPLE_ID,BLOCK_ID]"]
    else:
        return ["data=synthetic", f"data.rows={spec['rows']}"]
    if spec["rows"] is not None:
        out.append(f"data.max_rows={spec['rows']}")
    return out


def model_overrides(model: str, spec: dict, device: str = "cpu") -> list[str]:
    out = [f"model={model}", "tracking=none", "hpo=none", "parallelism=default"]
    if model == "lightgbm" and spec["rounds"] is not None:
        out.append(f"model.lightgbm.params.num_iterations={spec['rounds']}")
    if model == "xgboost" and spec["rounds"] is not None:
        out.append(f"model.xgboost.params.num_boost_round={spec['rounds']}")
    if model == "nn":
        # Every epoch on both sides (no early stopping) at the configured batch, so both do the same work.
        out += [f"model.nn.params.max_epochs={spec['epochs']}", "model.nn.params.patience=0",
                "model.nn.params.batch_size_by_rows=false", f"++model.nn.params.device={device}"]
    return out


def plain_fit(model: str, data, params: dict, seed: int, threads: int, device: str = "cpu") -> dict:
    if model == "nn":
        return plain.torch_mlp(data, params, seed=seed, threads=threads, device=device)
    fn = {"lightgbm": plain.lightgbm, "xgboost": plain.xgboost}[model]
    return fn(data, params, seed=seed, threads=threads)


def nn_device() -> str:
    """The network trains on the GPU on both sides where there is one, else on the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run(opts: Options) -> dict:
    table = QUICK if opts.quick else FULL
    engine = Engine(opts.scratch)
    threads = cpu_cores()
    device = nn_device()
    figures, notes = [], []
    settings = {
        "threads": threads,
        "data": {k: dict(v, repeats=opts.n(v["repeats"])) for k, v in table.items()},
        "bio_train_path": str(opts.bio_train),
        "gbm_early_stopping": "the engine's default: 50 rounds without improvement on the validation split",
        "nn": f"on {device} on both sides, patience=0 (no early stopping), the engine's other network defaults "
              "(batch 512, lr 1e-3, AdamW, hidden [256, 128], fp32)",
        "inside_engine_timer": INSIDE_ENGINE,
        "inside_plain_timer": INSIDE_PLAIN,
        "order": "engine and plain alternate within each repeat (engine first on even repeats)",
        "warm_up": "one untimed run of each side per model on 2,000 Adult rows before any timing",
    }

    _warm_up(engine, opts, threads, device)
    for name, spec in table.items():
        if name == "bio_train" and not opts.bio_train.exists():
            reason = f"{opts.bio_train} does not exist (give its path with --bio-train PATH)"
            for model in MODELS:
                group = f"{name} · {model}"
                figures += [not_measured(fig, reason, group=group) for fig in FIGURES]
            continue
        overrides = data_overrides(name, spec, opts)
        log(f"overhead: loading {name}")
        data, _ = load_data(overrides, opts.scratch / "engine")
        rows = {"train": len(data.train_idx), "val": len(data.val_idx), "test": len(data.test_idx),
                "features": data.X.shape[1]}
        settings["data"][name]["split_rows"] = rows
        label = f"{name} ({len(data.X):,} rows)"
        for model in MODELS:
            group = f"{label} · {model}"
            full = overrides + model_overrides(model, spec, device)
            figures += guarded(group, FIGURES, lambda: _measure(
                engine, data, full, model, group, opts.n(spec["repeats"]), threads, device, notes))
    notes.append("The network's scores are not expected to match: the DataLoader shuffles with its own random "
                 "stream and the engine's loop draws its own permutation per epoch, so batches, dropout masks and "
                 "thus weights differ; only the architecture, epochs, batch size, optimizer and learning rate agree.")
    return {"settings": settings, "figures": figures, "notes": notes}


def _measure(engine: Engine, data, overrides: list[str], model: str, group: str, n: int, threads: int,
             device: str, notes: list) -> list[dict]:
    params, seed = _model_params(overrides, model)
    e_sec, p_sec, e_auc, p_auc, e_fit = [], [], [], [], []
    for r in range(n):
        log(f"overhead: {group} repeat {r + 1}/{n}")
        for side in ("engine", "plain") if r % 2 == 0 else ("plain", "engine"):
            if side == "engine":
                res = engine.run(overrides, data)
                board = res.leaderboard
                e_sec.append(res.seconds)
                e_auc.append(leaderboard_scores(board)[model]["test"])
                e_fit.append(float(board.loc[board.model == model, "fit_seconds"].iloc[0]))
                engine.clean(res)
            else:
                sec, out = timed(lambda: plain_fit(model, data, params, seed, threads, device))
                p_sec.append(sec)
                p_auc.append(out["test_roc_auc"])
    same = model != "nn"
    identical = all(a == b for a, b in zip(e_auc, p_auc))
    if same and not identical:
        notes.append(f"{group}: the plain script's test AUC differs from the engine's "
                     f"({p_auc[0]!r} vs {e_auc[0]!r}); they should be identical")
    return [
        figure(FIGURES[0], ratios(e_sec, p_sec), "ratio", group=group, target=TARGET),
        figure(FIGURES[1], e_sec, "s", group=group),
        figure(FIGURES[2], e_fit, "s", group=group),
        figure(FIGURES[3], p_sec, "s", group=group),
        figure(FIGURES[4], e_auc, "roc_auc", group=group, kind="score"),
        figure(FIGURES[5], p_auc, "roc_auc", group=group, kind="score", identical=identical if same else None,
               compared_with="the engine's"),
    ]


def _model_params(overrides: list[str], model: str) -> tuple[dict, int]:
    """The model's params as the engine resolves them, and the seed the engine derives for its one fit."""
    from bench.common import compose
    from pipeline.graph.tasks import task_seed
    from pipeline.settings import read_settings

    settings = read_settings(compose(overrides))
    spec = next(s for s in settings.models if s.name == model)
    seed = task_seed(settings.conf.seed, model, 0, 0)
    if model == "nn":
        from pipeline.models.nn import DEFAULTS

        return {**DEFAULTS, **spec.params}, seed
    return dict(spec.params), seed


def _warm_up(engine: Engine, opts: Options, threads: int, device: str) -> None:
    """Imports and first-call costs of every library, on both sides, before anything is timed."""
    spec = {"rows": 2000, "rounds": 20, "epochs": 1}
    overrides = ["data=adult", "data.max_rows=2000"]
    data, _ = load_data(overrides, opts.scratch / "engine")
    log("overhead: warm-up")
    for model in MODELS:
        full = overrides + model_overrides(model, spec, device)
        engine.clean(engine.run(full, data))
        plain_fit(model, data, *_model_params(full, model), threads, device)
