"""The engine against plain `lgb.train` / `xgb.train` / a DataLoader torch loop on the same data,
parameters, seed and split: wall-time ratio and test scores side by side."""

from __future__ import annotations

from bench import plain
from bench.common import (
    Engine, Options, cpu_cores, figure, leaderboard_scores, load_data, log, not_measured, ratios, timed,
)

TARGET = ("<=", 1.10)
MODELS = ("lightgbm", "xgboost", "nn")

# Boosting rounds and network epochs per data set (the same cap on both sides); None keeps the
# engine's default (1000 rounds with early stopping after 50 without improvement).
FULL = {
    "adult": {"rows": None, "rounds": None, "epochs": 10, "repeats": 5},
    "bio_train": {"rows": None, "rounds": 300, "epochs": 4, "repeats": 3},
    "synthetic_1m": {"rows": 1_000_000, "rounds": 150, "epochs": 2, "repeats": 3},
}
QUICK = {
    "adult": {"rows": 5_000, "rounds": 50, "epochs": 2, "repeats": 2},
    "bio_train": {"rows": 10_000, "rounds": 50, "epochs": 2, "repeats": 2},
    "synthetic_1m": {"rows": 20_000, "rounds": 50, "epochs": 2, "repeats": 2},
}

INSIDE_ENGINE = (
    "pipeline.run.run(cfg, Runtime(...)) in this process, with the data already loaded: settings, plan, "
    "the fit (in the driver: one fit covers the machine), validation and test predictions, leaderboard, "
    "run-directory artifacts (plan.json, result pickle, leaderboard.csv, timeline/learning-curve/importance "
    "plots); tracking=none. Hydra composition and data loading are outside the timer."
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


def model_overrides(model: str, spec: dict) -> list[str]:
    out = [f"model={model}", "tracking=none", "hpo=none", "parallelism=default"]
    if model == "lightgbm" and spec["rounds"] is not None:
        out.append(f"model.lightgbm.params.num_iterations={spec['rounds']}")
    if model == "xgboost" and spec["rounds"] is not None:
        out.append(f"model.xgboost.params.num_boost_round={spec['rounds']}")
    if model == "nn":
        # Every epoch runs on both sides (no early stopping), so both do the same work.
        out += [f"model.nn.params.max_epochs={spec['epochs']}", "model.nn.params.patience=0"]
    return out


def plain_fit(model: str, data, params: dict, seed: int, threads: int) -> dict:
    fn = {"lightgbm": plain.lightgbm, "xgboost": plain.xgboost, "nn": plain.torch_mlp}[model]
    return fn(data, params, seed=seed, threads=threads)


def run(opts: Options) -> dict:
    from pipeline.executors.tasks import task_seed

    table = QUICK if opts.quick else FULL
    engine = Engine(opts.scratch)
    threads = cpu_cores()
    figures, notes = [], []
    settings = {
        "threads": threads,
        "data": {k: dict(v, repeats=opts.n(v["repeats"])) for k, v in table.items()},
        "bio_train_path": str(opts.bio_train),
        "gbm_early_stopping": "the engine's default: 50 rounds without improvement on the validation split",
        "nn": "patience=0 (no early stopping) on both sides, the engine's other network defaults "
              "(batch 512, lr 1e-3, AdamW, hidden [256, 128], fp32)",
        "inside_engine_timer": INSIDE_ENGINE,
        "inside_plain_timer": INSIDE_PLAIN,
        "order": "engine and plain alternate within each repeat (engine first on even repeats)",
        "warm_up": "one untimed run of each side per model on 2,000 Adult rows before any timing",
    }

    _warm_up(engine, opts, threads)
    for name, spec in table.items():
        if name == "bio_train" and not opts.bio_train.exists():
            reason = f"{opts.bio_train} does not exist (give its path with --bio-train PATH)"
            for model in MODELS:
                group = f"{name} · {model}"
                for fig in ("time ratio engine/plain", "engine seconds", "plain seconds"):
                    figures.append(not_measured(fig, reason, group=group))
            continue
        overrides = data_overrides(name, spec, opts)
        log(f"overhead: loading {name}")
        data, _ = load_data(overrides, opts.scratch / "engine")
        rows = {"train": len(data.train_idx), "val": len(data.val_idx), "test": len(data.test_idx),
                "features": data.X.shape[1]}
        settings["data"][name]["split_rows"] = rows
        for model in MODELS:
            group = f"{name} · {model}"
            full = overrides + model_overrides(model, spec)
            params = _model_params(full, model)
            seed = task_seed(0, model, 0, 0)
            n = opts.n(spec["repeats"])
            e_sec, p_sec, e_auc, p_auc, e_fit = [], [], [], [], []
            for r in range(n):
                log(f"overhead: {group} repeat {r + 1}/{n}")
                order = ("engine", "plain") if r % 2 == 0 else ("plain", "engine")
                for side in order:
                    if side == "engine":
                        res = engine.run(full, data)
                        score = leaderboard_scores(res.leaderboard)[model]
                        e_sec.append(res.seconds)
                        e_auc.append(score["test"])
                        e_fit.append(float(res.leaderboard.loc[res.leaderboard.model == model, "fit_seconds"].iloc[0]))
                        engine.clean(res)
                    else:
                        sec, out = timed(lambda: plain_fit(model, data, params, seed, threads))
                        p_sec.append(sec)
                        p_auc.append(out["test_roc_auc"])
            figures.append(figure("time ratio engine/plain", ratios(e_sec, p_sec), "ratio", group=group, target=TARGET))
            figures.append(figure("engine seconds", e_sec, "s", group=group))
            figures.append(figure("engine model.fit seconds", e_fit, "s", group=group))
            figures.append(figure("plain seconds", p_sec, "s", group=group))
            same = model != "nn"
            identical = all(a == b for a, b in zip(e_auc, p_auc))
            figures.append(figure("engine test ROC AUC", e_auc, "roc_auc", group=group, kind="score"))
            figures.append(figure("plain test ROC AUC", p_auc, "roc_auc", group=group, kind="score",
                                  identical_to_engine=identical if same else None))
            if same and not identical:
                notes.append(f"{group}: the plain script's test AUC differs from the engine's "
                             f"({p_auc[0]!r} vs {e_auc[0]!r}); they should be identical")
    notes.append("The network's scores are not expected to match: the DataLoader shuffles with its own random "
                 "stream and the engine's loop draws its own permutation per epoch, so batches, dropout masks and "
                 "thus weights differ; only the architecture, epochs, batch size, optimizer and learning rate agree.")
    return {"settings": settings, "figures": figures, "notes": notes}


def _model_params(overrides: list[str], model: str) -> dict:
    from bench.common import compose
    from pipeline.settings import read_settings

    settings = read_settings(compose(overrides))
    spec = next(s for s in settings.models if s.name == model)
    if model == "nn":
        from pipeline.models.nn import DEFAULTS

        return {**DEFAULTS, **spec.params}
    return dict(spec.params)


def _warm_up(engine: Engine, opts: Options, threads: int) -> None:
    """Imports and first-call costs of every library, on both sides, before anything is timed."""
    from pipeline.executors.tasks import task_seed

    spec = {"rows": 2000, "rounds": 20, "epochs": 1}
    overrides = ["data=adult", "data.max_rows=2000"]
    data, _ = load_data(overrides, opts.scratch / "engine")
    log("overhead: warm-up")
    for model in MODELS:
        full = overrides + model_overrides(model, spec)
        engine.clean(engine.run(full, data))
        plain_fit(model, data, _model_params(full, model), task_seed(0, model, 0, 0), threads)
