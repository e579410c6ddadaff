"""In-run hyperparameter search: an Optuna study per model, asked when a trial's first fold starts.

The driver asks and tells; workers only fit. Each trial's parameters are saved in the run
directory, so a resumed run re-fits exactly the trials it had started.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pipeline.errors import ConfigError, closest

log = logging.getLogger(__name__)

SEARCHERS = ("none", "random", "tpe", "grid")
DIM_TYPES = ("float", "int", "categorical")


def tell_study(study, trial, *args, **kwargs) -> None:
    """study.tell, where a GridSampler that has tried its whole grid stops the study: the trial is
    stored all the same, and Optuna's RuntimeError about `Study.stop` is no failure."""
    try:
        study.tell(trial, *args, **kwargs)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise


@dataclass(frozen=True)
class SearchDim:
    type: str
    low: Optional[float] = None
    high: Optional[float] = None
    log: bool = False
    step: Optional[float] = None
    choices: Optional[tuple] = None

    def check(self, key: str) -> None:
        if self.type not in DIM_TYPES:
            raise ConfigError(f"{key}.type={self.type!r} is not one of {', '.join(DIM_TYPES)}{closest(self.type, DIM_TYPES)}")
        if self.type == "categorical":
            if not self.choices:
                raise ConfigError(f"{key}: a categorical dimension needs a non-empty choices list")
            return
        if self.low is None or self.high is None:
            raise ConfigError(f"{key}: a {self.type} dimension needs low and high")
        if self.low >= self.high:
            raise ConfigError(f"{key}: low={self.low} must be below high={self.high}")
        if self.log and self.low <= 0:
            raise ConfigError(f"{key}: a log scale needs low > 0 (low={self.low})")
        if self.log and self.step is not None:
            raise ConfigError(f"{key}: log and step cannot be combined")

    def distribution(self):
        import optuna

        if self.type == "categorical":
            return optuna.distributions.CategoricalDistribution(list(self.choices))
        if self.type == "int":
            return optuna.distributions.IntDistribution(int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return optuna.distributions.FloatDistribution(float(self.low), float(self.high), log=self.log, step=self.step)

    def grid(self, points: int = 3) -> list:
        """Grid values: every choice; a stepped range in full; else `points` values, geometric on a log scale."""
        import numpy as np

        if self.type == "categorical":
            return list(self.choices)
        if self.step is not None:
            values = np.arange(self.low, self.high + self.step / 2, self.step)
        elif self.log:
            values = np.geomspace(self.low, self.high, points)
        else:
            values = np.linspace(self.low, self.high, points)
        if self.type == "int":
            return sorted({int(round(v)) for v in values})
        return [float(v) for v in values]


@dataclass(frozen=True)
class HpoSpec:
    searcher: str = "none"
    num_trials: int = 1
    seed: int = 0
    start_from_defaults: bool = True
    pruning: bool = False
    grid_points: int = 3

    def check(self, spaces: dict[str, dict[str, SearchDim]]) -> None:
        if self.searcher not in SEARCHERS:
            raise ConfigError(f"hpo.searcher={self.searcher!r} is not one of {', '.join(SEARCHERS)}{closest(self.searcher, SEARCHERS)}")
        if self.num_trials < 1:
            raise ConfigError(f"hpo.num_trials={self.num_trials} must be >= 1")
        if self.searcher == "none" and self.num_trials > 1:
            log.warning(
                "hpo.searcher=none: the %d trials fit each model's own params with different seeds; "
                "choose hpo=random, hpo=tpe or hpo=grid to search", self.num_trials,
            )
        for model, space in spaces.items():
            for name, dim in space.items():
                dim.check(f"model.{model}.search_space.{name}")
            if self.searcher != "none" and not space:
                raise ConfigError(f"hpo.searcher={self.searcher} but model.{model}.search_space is empty")
        if self.grid_points < 2:
            raise ConfigError(f"hpo.grid_points={self.grid_points} must be >= 2")


    def trials_for(self, model: str, space: dict[str, SearchDim]) -> int:
        """How many trials a model runs: num_trials, or fewer when a grid has fewer points."""
        if self.searcher != "grid":
            return self.num_trials
        size = 1
        for dim in space.values():
            size *= len(dim.grid(self.grid_points))
        if size < self.num_trials:
            log.info("hpo=grid: model %s has %d grid points, so it runs %d trials, not hpo.num_trials=%d",
                     model, size, size, self.num_trials)
        return min(self.num_trials, size)


class TrialSource:
    """The parameters of each (model, trial), and the score each trial earned."""

    def __init__(self, spec: HpoSpec, spaces: dict[str, dict[str, SearchDim]], defaults: dict[str, dict],
                 directions: str, store_dir: Optional[Path] = None, prior: Optional[dict] = None):
        self.spec, self.spaces, self.defaults = spec, spaces, defaults
        self.direction = directions  # "maximize" | "minimize"
        self.store_dir = store_dir
        self.prior = prior if prior is not None else self._load_prior()
        self.asked: dict[tuple[str, int], dict] = {}
        self.scores: dict[tuple[str, int], float] = {}
        self._studies: dict[str, Any] = {}
        self._trials: dict[tuple[str, int], Any] = {}

    def params(self, model: str, trial: int) -> dict:
        key = (model, trial)
        if key in self.asked:
            return self.asked[key]
        if self.spec.searcher == "none":
            params = {}
        else:
            study = self._study(model)
            fixed = self.prior.get(model, {}).get(str(trial))
            if fixed is None and trial == 0 and self.spec.start_from_defaults:
                fixed = {k: v for k, v in self.defaults.get(model, {}).items() if k in self.spaces[model]}
            if fixed:
                study.enqueue_trial(fixed, skip_if_exists=False)
            optuna_trial = study.ask({k: d.distribution() for k, d in self.spaces[model].items()})
            self._trials[key] = optuna_trial
            params = dict(optuna_trial.params)
        self.asked[key] = params
        self._save(model)
        return params

    def tell(self, model: str, trial: int, score: float, pruned: bool = False) -> None:
        self.scores[(model, trial)] = score
        optuna_trial = self._trials.get((model, trial))
        if optuna_trial is not None:
            import optuna

            state = optuna.trial.TrialState.PRUNED if pruned else optuna.trial.TrialState.COMPLETE
            tell_study(self._study(model), optuna_trial, None if pruned else score, state=state)

    def _study(self, model: str):
        if model not in self._studies:
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            seed = self.spec.seed
            if self.spec.searcher == "random":
                sampler = optuna.samplers.RandomSampler(seed=seed)
            elif self.spec.searcher == "tpe":
                sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(2, self.spec.num_trials // 3)))
            else:
                grid = {k: d.grid(self.spec.grid_points) for k, d in self.spaces[model].items()}
                sampler = optuna.samplers.GridSampler(grid, seed=seed)
            self._studies[model] = optuna.create_study(direction=self.direction, sampler=sampler, study_name=model)
        return self._studies[model]

    def _save(self, model: str) -> None:
        if self.store_dir is None:
            return
        self.store_dir.mkdir(parents=True, exist_ok=True)
        mine = {str(t): p for (m, t), p in self.asked.items() if m == model}
        from pipeline.store import atomic_write_bytes

        atomic_write_bytes(self.store_dir / f"{model}.json", json.dumps(mine, indent=2, default=str).encode())

    def _load_prior(self) -> dict:
        if self.store_dir is None or not self.store_dir.exists():
            return {}
        return {p.stem: json.loads(p.read_text()) for p in self.store_dir.glob("*.json")}
