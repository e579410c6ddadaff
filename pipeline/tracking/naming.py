"""What a run is called in MLflow, and which of its parameters are worth comparing.

Run lists cut a name to its first few words, so a name leads with what varies: a sweep's job with its
swept overrides (`model=xgboost seed=1`, then its other overrides), a sweep's parent with its sweep
(`sweep: model=lightgbm,xgboost × seed=0,1`, or the Optuna study and its objective), a single run with
its models (`lightgbm+xgboost parallelism=bag5`). Parameters are what a user plots against a score:
the model kind, the swept values, each model's library parameters under its own prefix; not the
engine's plumbing (`_target_`s, the allow-list), empty or unset values, or another source's settings.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

HIDDEN_PREFIXES = ("tracking.", "hydra.")  # where a run logs and how Hydra runs it: not what it is
SYNTHETIC_KEYS = ("rows", "features", "classes", "categorical_features")  # the generator's, data=synthetic only
PLUMBING = ("allowed_targets", "dry_run", "resume")


def override_key(override: str) -> str:
    """`+model.x.params.y=1` -> `model.x.params.y`."""
    return override.partition("=")[0].lstrip("+~")


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
    keys += [str(k) for k in (sweeper_params or {}) if str(k) not in keys]
    return keys


def job_name(own: Sequence[str], swept: Sequence[str]) -> str:
    """A sweep job's name: its overrides with the swept keys first, in the sweep's order."""
    order = {key: i for i, key in enumerate(swept)}
    first = sorted((o for o in own if override_key(o) in order), key=lambda o: order[override_key(o)])
    return " ".join(first + sorted(o for o in own if override_key(o) not in order)) or "default"


def single_name(models: Sequence[str], own: Sequence[str]) -> str:
    """A single run's name: its models, then its overrides other than the model group's."""
    rest = sorted(o for o in own if override_key(o) != "model")
    return " ".join(["+".join(models), *rest])


def sweep_name(sweep_overrides: Sequence[str], sweeper: Optional[dict] = None, objectives: Sequence[str] = ()) -> str:
    """A sweep parent's name: `sweep: a=1,2 × b=x,y`, or `optuna: <study> (<direction> <objectives>)`."""
    sweeper = sweeper or {}
    shown = shown_overrides(sweep_overrides)
    if "optuna" in str(sweeper.get("_target_", "")).lower():
        direction = sweeper.get("direction")
        directions = direction if isinstance(direction, (list, tuple)) else [direction]
        goal = ", ".join(f"{d or 'maximize'} {o}" for d, o in zip(directions, objectives or ["val_score"]))
        return f"optuna: {sweeper.get('study_name') or 'study'} ({goal})"
    swept = set(swept_keys(sweep_overrides, sweeper.get("params")))
    varying = [o for o in shown if override_key(o) in swept]
    params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items() if k not in {override_key(o) for o in shown}]
    return "sweep: " + (" × ".join(varying + params) or " ".join(shown) or "default")


def comparable_params(flat: dict[str, Any], models: Sequence[str], components: dict[str, str],
                      searches: bool, data_kind: Optional[str]) -> dict[str, Any]:
    """The run's parameters for MLflow from its flattened config: `model` (the kinds), each model's
    library parameters under `model.<name>.params.` (the key a sweep overrides; it sorts right after
    `model`, which MLflow's compare view plots first), the kind of each of `components` by group
    (`hpo`: tpe, `executor`: local, as a user picks them), the rest as configured; no `_target_`s,
    plumbing, unset values, empty lists or maps, tracking settings, a search's settings where the
    searcher does not search (`searches`), nor the synthetic generator's settings for other data
    (`data_kind`, the data source's kind)."""
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
        else:
            out[key] = value
    return out
