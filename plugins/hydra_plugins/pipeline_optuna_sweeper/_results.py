"""`optimization_results.yaml`: the best trial, or the Pareto front of a multi-objective search."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from hydra_plugins.pipeline_optuna_sweeper.config import OptunaSweeperConf
from hydra_plugins.pipeline_optuna_sweeper._space import SearchSpace, format_value


def write_results(path: Path, study, space: SearchSpace, settings: OptunaSweeperConf, objectives: Optional[list[str]],
                  done: int, failed: int) -> None:
    """One objective: best_value, best_params, best_overrides (as before). Several: `solutions`, the
    Pareto front, each with its values, params, overrides and the job that ran it."""
    import yaml

    data: dict[str, Any] = {"name": "optuna", "study_name": study.study_name}
    if settings.multi_objective:
        data["direction"] = list(settings.directions)
        if objectives:
            data["objectives"] = list(objectives)
        data["solutions"] = [_solution(trial, space) for trial in study.best_trials]
    else:
        best = study.best_trial
        data.update({
            "direction": settings.directions[0],
            "best_value": float(best.value),
            "best_params": {k: _yaml_value(v) for k, v in best.params.items()},
            "best_overrides": overrides(best, space),
            "best_trial": best.number,
        })
    data.update({"n_trials": done, "n_failed": failed})
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def overrides(trial, space: SearchSpace) -> list[str]:
    """The overrides that run this trial again (paste them after `python -m pipeline`)."""
    return list(space.fixed.values()) + [f"{k}={format_value(v)}" for k, v in trial.params.items()]


def _solution(trial, space: SearchSpace) -> dict:
    solution = {
        "trial": trial.number,
        "values": [float(v) for v in trial.values],
        "params": {k: _yaml_value(v) for k, v in trial.params.items()},
        "overrides": overrides(trial, space),
    }
    for key in ("job", "sweep_dir"):
        if key in trial.user_attrs:
            solution[key] = trial.user_attrs[key]
    return solution


def _yaml_value(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)
