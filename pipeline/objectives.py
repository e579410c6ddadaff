"""What a run returns to a sweeper: its validation score, and optionally what the returned model costs.

`objectives: [val_score]` (the default) returns one float, as Hydra's sweepers expect;
`objectives: [val_score, fit_seconds]` returns a list, one value per objective, for a
multi-objective search (`hydra.sweeper.direction: [maximize, minimize]`).
"""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence, Union

from pipeline.errors import ConfigError

BLEND = "ensemble_blend"  # pipeline.graph.refit.BLEND, named here to keep that module's imports off this path

OBJECTIVES = {
    "val_score": "the best validation score (eval_metric) of the leaderboard's top row (a blend with refits "
                 "has none: the first row's that has one, the bagged side's answer)",
    "fit_seconds": "seconds spent fitting the top row's model (an ensemble or a stacked bag: every model below it too)",
    "predict_seconds": "seconds its model took to predict the validation and test rows (an ensemble or a stacked bag: "
                       "with the bags below it)",
}


def check(names: Sequence[str]) -> tuple[str, ...]:
    """The configured objectives, checked: known names, none twice, at least one."""
    names = tuple(names)
    valid = ", ".join(OBJECTIVES)
    if not names:
        raise ConfigError(f"objectives=[]: give at least one of {valid}")
    for name in names:
        if name not in OBJECTIVES:
            raise ConfigError(f"objectives: {name!r} is not an objective; valid ones are {valid}")
    if len(set(names)) != len(names):
        raise ConfigError(f"objectives={list(names)}: each objective may appear once")
    return names


def inner_fit_seconds(fit_tasks, results: Mapping) -> dict[int, float]:
    """Per stacking level, the fit seconds of the models fit there without 2+ folds (`Task.inner`) that
    finished."""
    inner: dict[int, float] = {}
    for task in fit_tasks:
        result = results.get(task.id)
        if task.inner and result is not None:
            inner[task.level] = inner.get(task.level, 0.0) + result.fit_seconds
    return inner


def job_return(names: Sequence[str], rows: Sequence[dict], metric: str,
               inner_fit_seconds: Optional[Mapping[int, float]] = None) -> Union[float, list[float]]:
    """The run's return value from its leaderboard rows (best first): a float for one objective,
    a list of floats for several. `inner_fit_seconds`: per stacking level, the fit seconds of the
    models fit there without 2+ folds (they make the features of the level above; no row shows them)."""
    top = rows[0]
    scored = next((r for r in rows if not math.isnan(float(r[f"val_{metric}"]))), top)
    values = {"val_score": float(scored[f"val_{metric}"])}
    # What the returned model needs: a stacked bag every level below it, the ensemble every bag. Refit
    # rows (refit=true, no validation score) are not part of it, except for the blend of the bagged
    # ensemble and the refits' (hpo=auto; pipeline.graph.refit.blend_row), which needs both.
    blended = top["model"] == BLEND
    level = math.inf if top["model"] == "ensemble" or blended else top.get("level", 1)
    below = [r for r in rows if r is not top and r["model"] not in ("ensemble", "ensemble_refit")
             and r.get("level", 1) < level and (blended or not math.isnan(float(r[f"val_{metric}"])))]
    inner = sum(s for at, s in (inner_fit_seconds or {}).items() if at < level)
    values["fit_seconds"] = float(top["fit_seconds"] + sum(r["fit_seconds"] for r in below) + inner)
    values["predict_seconds"] = float(top["predict_seconds"] + sum(r["predict_seconds"] for r in below))
    out = [values[name] for name in names]
    return out[0] if len(out) == 1 else out
