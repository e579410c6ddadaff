"""What a run is called in MLflow, and which of its parameters are worth comparing.

MLflow's runs list shows about the first 18 characters of a name, so a name is what varies, short:
a sweep's job by its swept values in the sweep's order (`xgboost s=1`, `lr=0.065 leaves=31`: the
model kind by its value, other keys by their last word, abbreviated, numbers to two significant
digits below one); the job's full overrides are its `pipeline.overrides` tag. A sweep's parent is
named by its sweep (`sweep: lightgbm,xgboost × s=0,1`) or its Optuna study (`adult-lgbm (optuna:
maximize val_score)`, the searched keys for a study without a name), a single run by its models
(`lightgbm+xgboost folds=5`). Parameters are what a user plots against a score: the model kind, the
swept values, each model's library parameters under its own prefix; not the engine's plumbing
(`_target_`s, the allow-list), constants of the data (its label column), a model's device or
stopping rule unless swept, empty or unset values, or another source's settings: the config.yaml
artifact keeps the whole configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterable, Optional, Sequence

from pipeline.override_text import override_key, override_parts

HIDDEN_PREFIXES = ("tracking.", "hydra.")  # where a run logs and how Hydra runs it: not what it is
SYNTHETIC_KEYS = ("rows", "features", "classes", "categorical_features")  # the generator's, data=synthetic only
PLUMBING = ("allowed_targets", "dry_run", "resume", "data.label")
# a model's settings that rarely vary, kept out of the params unless a sweep varies them: where it ran and
# when it stops (the same in every job, they would crowd MLflow's compare view, which plots the first
# params by name that differ between the runs compared, a param another model kind lacks included)
UNLESS_SWEPT = ("device", "early_stopping_round", "early_stopping_rounds", "patience", "verbosity")
SHORT_KEYS = {"seed": "s", "learning_rate": "lr", "num_leaves": "leaves", "num_iterations": "iters",
              "num_boost_round": "rounds", "max_depth": "depth", "max_epochs": "epochs", "max_rows": "rows",
              "num_folds": "folds", "batch_size": "batch", "weight_decay": "wd", "hidden_sizes": "hidden",
              "min_data_in_leaf": "min_leaf", "feature_fraction": "ff", "colsample_bytree": "colsample"}


def shown_overrides(overrides: Iterable[str]) -> list[str]:
    """A job's overrides as its name shows them: secrets masked, where it logs and Hydra's own left out."""
    from pipeline.redact import redact_override

    return [redact_override(o) for o in overrides if not override_key(o).startswith(HIDDEN_PREFIXES)]


def swept_keys(sweep_overrides: Sequence[str], sweeper_params: Optional[dict] = None) -> list[str]:
    """The keys a sweep varies, in the order given: overrides in sweep syntax (`a=1,2`, `range(…)`,
    `choice(…)`) and the sweeper's own search space (`hydra.sweeper.params`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys = []
    try:
        parsed = OverridesParser.create().parse_overrides(list(sweep_overrides))
    except Exception:  # noqa: BLE001  (Hydra parsed them already; a name is no place to fail)
        parsed = []
    for override in parsed:
        if override.is_sweep_override():
            keys.append(override.get_key_element().lstrip("+~"))
    keys += [k for k in flat_keys(sweeper_params or {}) if k not in keys]
    return keys


def flat_keys(params, prefix: str = "") -> list[str]:
    """The dotted keys of a search space given flat (`a.b: …`) or nested (`a: {b: …}`, as the command
    line's `hydra.sweeper.params.a.b=…` makes it)."""
    keys = []
    for key, value in params.items():
        full = f"{prefix}{key}"
        keys += flat_keys(value, full + ".") if isinstance(value, Mapping) else [full]
    return keys


def short_key(key: str, others: Sequence[str] = ()) -> str:
    """A key as a name shows it: its last word, abbreviated (`model.lightgbm.params.num_leaves` ->
    `leaves`); with the word before it where another of `others` would read the same (`lightgbm.lr`)."""
    def tail(k: str, n: int) -> str:
        words = [w for w in k.split(".") if w != "params"]
        return ".".join(words[-n:-1] + [SHORT_KEYS.get(words[-1], words[-1])])

    clash = any(o != key and tail(o, 1) == tail(key, 1) for o in others)
    return tail(key, 2 if clash else 1)


def short_value(text: str) -> str:
    """A value as a name shows it: numbers below one to two significant digits (0.0646642 -> 0.065),
    larger ones to four; anything else as written."""
    try:
        number = float(text)
    except ValueError:
        return text
    if number.is_integer() and "." not in text and "e" not in text.lower():
        return text
    return f"{number:.2g}" if abs(number) < 1 else f"{number:.4g}"


def short_override(override: str, others: Sequence[str] = ()) -> str:
    """`model=xgboost` -> `xgboost`, `model.lightgbm.params.learning_rate=0.0646642` -> `lr=0.065`."""
    key, value = override_parts(override)
    if key == "model":
        return value
    return f"{short_key(key, others)}={short_value(value) if ',' not in value else value}"


def job_name(own: Sequence[str], swept: Sequence[str]) -> str:
    """A sweep job's name: its swept values, short, in the sweep's order (its overrides, short, where
    the sweep varies none of them); the full overrides are the run's `pipeline.overrides` tag."""
    order = {key: i for i, key in enumerate(swept)}
    first = sorted((o for o in own if override_key(o) in order), key=lambda o: order[override_key(o)])
    chosen = first or sorted(own)
    keys = [override_key(o) for o in chosen]
    return " ".join(short_override(o, keys) for o in chosen) or "default"


def single_name(models: Sequence[str], own: Sequence[str]) -> str:
    """A single run's name: its models, then its overrides other than the model group's, short."""
    rest = sorted(o for o in own if override_key(o) != "model")
    keys = [override_key(o) for o in rest]
    return " ".join(["+".join(models), *(short_override(o, keys) for o in rest)])


def sweep_name(sweep_overrides: Sequence[str], sweeper: Optional[dict] = None, objectives: Sequence[str] = ()) -> str:
    """A sweep parent's name: `sweep: lightgbm,xgboost × s=0,1`, or `<study> (optuna: <direction>
    <objectives>)`, the study's searched keys where it has no name."""
    sweeper = sweeper or {}
    shown = shown_overrides(sweep_overrides)
    swept = swept_keys(sweep_overrides, sweeper.get("params"))
    if "optuna" in str(sweeper.get("_target_", "")).lower():
        direction = sweeper.get("direction")
        directions = direction if isinstance(direction, (list, tuple)) else [direction]
        goal = ", ".join(f"{d or 'maximize'} {o}" for d, o in zip(directions, objectives or ["val_score"]))
        study = sweeper.get("study_name") or " × ".join(short_key(k, swept) for k in swept) or "study"
        return f"{study} (optuna: {goal})"
    varying = [o for o in shown if override_key(o) in set(swept)]
    shown_keys = {override_key(o) for o in shown}
    params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items() if k not in shown_keys]
    named = [short_override(o, swept) for o in varying + params]
    return "sweep: " + (" × ".join(named) or " ".join(shown) or "default")


def comparable_params(flat: dict[str, Any], models: Sequence[str], components: dict[str, str],
                      searches: bool, data_kind: Optional[str], swept: Sequence[str] = ()) -> dict[str, Any]:
    """The run's parameters for MLflow from its flattened config: `model` (the kinds), each model's
    library parameters under `model.<name>.params.` (the key a sweep overrides; it sorts right after
    `model`, which MLflow's compare view plots first), the kind of each of `components` by group
    (`hpo`: tpe, `executor`: local, as a user picks them), the rest as configured; no `_target_`s,
    plumbing, unset values, empty lists or maps, tracking settings, a search's settings where the
    searcher does not search (`searches`), the synthetic generator's settings for other data
    (`data_kind`, the data source's kind), nor a model's device or stopping rule (UNLESS_SWEPT) where
    the sweep does not vary it (`swept`)."""
    out: dict[str, Any] = {"model": ",".join(models), **components}
    for key, value in flat.items():
        parts = key.split(".")
        if value is None or value in ([], {}, "") or parts[-1] == "_target_" or key in PLUMBING:
            continue
        if parts[0] == "tracking" or (not searches and parts[0] == "hpo"):
            continue  # where the run is logged; a search's settings where there is no search
        if parts[0] == "data" and len(parts) == 2 and parts[1] in SYNTHETIC_KEYS and data_kind != "synthetic":
            continue
        if parts[0] == "model" and len(parts) >= 3 and parts[2] == "search_space":
            continue  # the search space is the sweep's, not a value of this run: hpo.* and the trials say it
        if parts[0] == "model" and parts[-1] in UNLESS_SWEPT and key not in swept:
            continue
        out[key] = value
    return out
