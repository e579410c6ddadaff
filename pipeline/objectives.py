"""What a run returns to a sweeper: its validation score, and optionally what the returned model costs.

`objectives: [val_score]` (the default) returns one float, as Hydra's sweepers expect;
`objectives: [val_score, fit_seconds]` returns a list, one value per objective, for a
multi-objective search (`hydra.sweeper.direction: [maximize, minimize]`).
"""

from __future__ import annotations

import math
from typing import Sequence, Union

from pipeline.errors import ConfigError

OBJECTIVES = {
    "val_score": "the best validation score (eval_metric) of the leaderboard's top row",
    "fit_seconds": "seconds spent fitting the top row's model (an ensemble: its base models too)",
    "predict_seconds": "seconds its model took to predict the validation and test rows (an ensemble: its base models')",
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


def job_return(names: Sequence[str], rows: Sequence[dict], metric: str) -> Union[float, list[float]]:
    """The run's return value from its leaderboard rows (best first): a float for one objective,
    a list of floats for several."""
    top = rows[0]
    values = {"val_score": float(top[f"val_{metric}"])}
    # the bagged base models; refit rows (refit=true, no validation score) are not part of what is returned
    base = [r for r in rows if r["model"] != "ensemble" and not math.isnan(float(r[f"val_{metric}"]))]
    if top["model"] == "ensemble":  # the ensemble's cost includes fitting and predicting with its members
        values["fit_seconds"] = float(top["fit_seconds"] + sum(r["fit_seconds"] for r in base))
        values["predict_seconds"] = float(top["predict_seconds"] + sum(r["predict_seconds"] for r in base))
    else:
        values["fit_seconds"] = float(top["fit_seconds"])
        values["predict_seconds"] = float(top["predict_seconds"])
    out = [values[name] for name in names]
    return out[0] if len(out) == 1 else out
