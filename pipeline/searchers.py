"""Searchers: what samples each model's trials. `hpo._target_` names the Searcher class: the engine's
(conf/hpo/*.yaml: NoSearch, RandomSearch, TpeSearch, GridSearch) or any other in a module
allowed_targets lets in, built with `hpo.options` as its keywords.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

log = logging.getLogger(__name__)


class Searcher:
    """Makes the Optuna sampler of one model's study; `searches = False` fits the model's own params."""

    searches = True
    portfolio = False  # whether the first trials after the model's own params are its kind's portfolio
    # whether a searched trial (or ensemble) stands over the model's own params only for a held-out gain beyond
    # the rows' noise (pipeline.graph.nodes.ensemble); else the best held-out score wins, as Optuna's best_trial
    noise_guard = False
    kind: str = ""  # the engine's: none | random | tpe | grid (the run's records show a user's by its class)
    # the most finished trials a model's study holds for its sampler, or None: all of them
    # (pipeline.hpo.TrialSource renews the study with its best trials and its latest ones)
    study_window: Optional[int] = None

    def sampler(self, hpo, model: str, space: dict) -> Any:
        """An optuna.samplers.BaseSampler for `model`'s study (hpo: the run's HpoConf)."""
        raise NotImplementedError

    def trials(self, hpo, model: str, space: dict) -> int:
        """How many trials `model` runs."""
        return hpo.num_trials


class NoSearch(Searcher):
    """hpo=none: every trial fits the model's own params (with its own seed)."""

    searches = False
    kind = "none"

    def sampler(self, hpo, model: str, space: dict) -> None:
        return None


class RandomSearch(Searcher):
    kind = "random"

    def sampler(self, hpo, model: str, space: dict):
        import optuna

        return optuna.samplers.RandomSampler(seed=hpo.seed)


# Optuna's TPE reads every finished trial at each ask: 5 ms at 50 trials, 17 ms at 400, 32 ms at 1,600 (8
# dimensions, 2-core box), so that a 120-s run on Pima spent 46% of its time asking. From 250 trials its good
# group is the best 25 and the trials before the latest 25 weigh less and less; a study renewed at twice the
# window with those 25 and the latest others keeps both groups much as the whole history gives them
STUDY_WINDOW = 250


class TpeSearch(Searcher):
    kind = "tpe"

    def __init__(self, n_startup_trials: Optional[int] = None, study_window: Optional[int] = STUDY_WINDOW):
        from pipeline.errors import ConfigError

        self.n_startup_trials = n_startup_trials  # null: a third of the trials, 2 to 10
        if study_window is not None and (isinstance(study_window, bool) or not isinstance(study_window, int)
                                         or study_window < 1):
            raise ConfigError(f"hpo.options.study_window={study_window!r}: the most finished trials a "
                              "model's study holds must be a whole number of at least 1 (default "
                              f"{STUDY_WINDOW}), or null to keep every trial")
        self.study_window = study_window

    def sampler(self, hpo, model: str, space: dict):
        import optuna

        startup = self.n_startup_trials
        if startup is None:
            startup = min(10, max(2, hpo.num_trials // 3))
        return optuna.samplers.TPESampler(seed=hpo.seed, n_startup_trials=startup)


class AutoSearch(TpeSearch):
    """hpo=auto, for a time budget (the default when time_limit_s is given and hpo is not): each model's
    own params first (trial 0), then its kind's portfolio of proven configurations (ModelProfile.portfolio),
    then TPE learning from them, with pruning; the budget decides how many trials run (the scheduler
    starts none that cannot finish), so num_trials is only a ceiling."""

    kind = "auto"
    portfolio = True
    noise_guard = True

    def __init__(self, n_startup_trials: Optional[int] = 4):
        super().__init__(n_startup_trials)


class GridSearch(Searcher):
    """Every choice, every value of a stepped range, and hpo.grid_points values of each continuous range."""

    kind = "grid"

    def sampler(self, hpo, model: str, space: dict):
        import optuna

        return optuna.samplers.GridSampler({k: d.grid(hpo.grid_points) for k, d in space.items()}, seed=hpo.seed)

    def trials(self, hpo, model: str, space: dict) -> int:
        size = 1
        for dim in space.values():
            size *= len(dim.grid(hpo.grid_points))
        if size < hpo.num_trials:
            log.info("hpo=grid: model %s has %d grid points, so it runs %d trials, not hpo.num_trials=%d",
                     model, size, size, hpo.num_trials)
        return min(hpo.num_trials, size)
