"""In-run hyperparameter search: an Optuna study per model, asked when a trial's first fold starts.

The driver asks and tells; workers only fit. Each trial's parameters are saved in the run
directory, so a resumed run re-fits exactly the trials it had started.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from pipeline.config import HpoConf, SearchDimConf

log = logging.getLogger(__name__)

# the best finished trials a renewed study keeps (`TrialSource._asking_study`): TPE's good group holds the
# best tenth of the trials, at most 25 (Optuna's default gamma)
KEPT_BEST = 25


def tell_study(study, trial, *args, **kwargs) -> None:
    """study.tell, where a GridSampler that has tried its whole grid stops the study: the trial is
    stored all the same, and Optuna's RuntimeError about `Study.stop` is no failure."""
    try:
        study.tell(trial, *args, **kwargs)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise


class TrialSource:
    """The parameters of each (model, trial), and the score each trial earned.

    Under a time limit the scheduler asks for a trial only when its first fold may start and every
    fold may still end by the deadline; a trial cut after that is dropped (`drop`), never half-scored."""

    def __init__(self, spec: HpoConf, spaces: dict[str, dict[str, SearchDimConf]], defaults: dict[str, dict],
                 directions: str, store_dir: Optional[Path] = None, prior: Optional[dict] = None,
                 portfolios: Optional[dict[str, tuple]] = None,
                 default_models: Optional[tuple[str, ...]] = None):
        self.spec, self.spaces, self.defaults = spec, spaces, defaults
        # the models whose trial 0 the run without a search fits: the config's own, not those hpo=auto added
        self.default_models = tuple(defaults) if default_models is None else tuple(default_models)
        self.portfolios = portfolios or {}  # model -> its kind's proven configurations (hpo=auto)
        self.searcher = spec.make_searcher()
        self.direction = directions  # "maximize" | "minimize"
        self.store_dir = store_dir
        self.prior = prior if prior is not None else self._load_prior()
        self.asked: dict[tuple[str, int], dict] = {}
        self.scores: dict[tuple[str, int], float] = {}
        self.dropped: set[tuple[str, int]] = set()  # cut by the time limit before all their folds ran
        self.pruned: set[tuple[str, int]] = set()  # stopped after some folds: losing (`fold_scored`)
        self._fold_scores: dict[tuple[str, int], list[float]] = {}
        self._studies: dict[str, Any] = {}  # model -> its current study (renewed past the searcher's window)
        self._generations: dict[str, int] = {}  # model -> how often its study was renewed
        self._trials: dict[tuple[str, int], Any] = {}
        self._counts: dict[str, int] = {}  # model -> trials asked in this run
        self.best_error: dict[str, float] = {}  # model -> its best whole trial's error (`error`)
        self.told: dict[str, int] = {}  # model -> trials told (whole or pruned)

    @property
    def noise_guard(self) -> bool:
        """Whether a searched trial stands over a model's own params only for a held-out gain beyond the rows'
        noise (hpo=auto: pipeline.searchers.Searcher.noise_guard); the scheduler and the ensemble read it."""
        return bool(getattr(self.searcher, "noise_guard", False))

    def params(self, model: str, trial: int) -> dict:
        key = (model, trial)
        if key in self.asked:
            return self.asked[key]
        if not self.searcher.searches:
            params = {}
        else:
            study = self._asking_study(model)
            space = self.spaces[model]
            fixed = self.prior.get(model, {}).get(str(trial))
            if fixed:  # recorded by an earlier run: its search space may have been another
                fixed = in_space(fixed, space, f"model {model}, trial {trial}")
            elif fixed is None:
                fixed = self._named(model, trial)
                if fixed:  # a dimension it cannot set (the params leave it unset) stays unset, not drawn
                    space = {k: d for k, d in space.items() if k in fixed}
            if fixed:
                study.enqueue_trial(fixed, skip_if_exists=False)
            optuna_trial = study.ask({k: d.distribution() for k, d in space.items()})
            self._trials[key] = optuna_trial
            params = dict(optuna_trial.params)
        self.asked[key] = params
        self._save(model, trial)
        return params

    def _named(self, model: str, trial: int) -> Optional[dict]:
        """The searched values of a named configuration, or None where the sampler chooses: trial 0 is the
        model's own params (hpo.start_from_defaults), the next trials under hpo=auto its kind's portfolio
        entries, each laid over those params (an entry changes what it names, as a user's override does).
        Only the values the search space holds are kept."""
        entry = None
        if trial == 0 and self.spec.start_from_defaults:
            entry = {}
        elif self.searcher.portfolio:
            configs = self.portfolios.get(model, ())
            index = trial - (1 if self.spec.start_from_defaults else 0)
            entry = configs[index] if 0 <= index < len(configs) else None
        if entry is None:
            return None
        space = self.spaces[model]
        merged = {**self.defaults.get(model, {}), **entry}
        return {k: v for k, v in merged.items() if k in space and space[k].contains(v)} or None

    def tell(self, model: str, trial: int, score: float, pruned: bool = False) -> None:
        self.scores[(model, trial)] = score
        self.told[model] = self.told.get(model, 0) + 1
        if not pruned and score == score:  # (not NaN)
            self.best_error[model] = min(self.best_error.get(model, float("inf")), self.error(score))
        optuna_trial = self._trials.get((model, trial))
        if optuna_trial is not None:
            import optuna

            state = optuna.trial.TrialState.PRUNED if pruned else optuna.trial.TrialState.COMPLETE
            self._tell(model, optuna_trial, None if pruned else score, state=state)

    def error(self, score: float) -> float:
        """A score as an error, lower better (`pipeline.metrics.error_of`)."""
        from pipeline.metrics import error_of

        return error_of(score, self.direction == "maximize")

    def awaits_first_score(self, model: str, trial: int) -> bool:
        """Whether `trial` is one successive halving may stop (`fold_scored`) and none of its folds has
        told its score yet."""
        return (self.spec.pruning and self.searcher.searches and trial != 0
                and (model, trial) not in self.pruned and not self._fold_scores.get((model, trial)))

    def fold_scored(self, model: str, trial: int, score: float, pruned: bool = False) -> bool:
        """A fold of `trial` ended with `score` on its held-out rows, and other folds of the trial are
        still to fit: whether the trial loses and its later folds should not start (it is told PRUNED).

        Successive halving over folds (Optuna's SuccessiveHalvingPruner, one fold a unit of resource):
        the mean score of the folds fitted so far is reported at step = their count; at 1 and 3 folds a
        trial goes on only while it ranks in the best third of the trials that got as far. A fold its
        fit pruned over rounds (hpo.pruning's report callback) stops the trial too. Trial 0, the
        model's own params, is never stopped: the floor under the model's row."""
        key = (model, trial)
        optuna_trial = self._trials.get(key)
        if not self.spec.pruning or optuna_trial is None or trial == 0 or key in self.pruned:
            return False
        scores = self._fold_scores.setdefault(key, [])
        scores.append(float(score))
        optuna_trial.report(sum(scores) / len(scores), len(scores))
        if not (pruned or optuna_trial.should_prune()):
            return False
        import optuna

        self.pruned.add(key)
        self._trials.pop(key)
        self._tell(model, optuna_trial, state=optuna.trial.TrialState.PRUNED)
        return True

    def drop(self, model: str, trial: int) -> None:
        """A trial the time limit cut before all its folds ran: it earns no score, and its Optuna trial
        (if its parameters were asked) is told it failed, so no sampler waits on it or learns from it.
        A resumed run with more time fits it again (its parameters stay saved)."""
        if (model, trial) not in self.asked or (model, trial) in self.pruned:
            return  # never started, or stopped as a losing trial (told so): nothing to drop
        self.dropped.add((model, trial))
        optuna_trial = self._trials.pop((model, trial), None)
        if optuna_trial is not None:
            import optuna

            self._tell(model, optuna_trial, state=optuna.trial.TrialState.FAIL)

    def _study(self, model: str):
        """`model`'s current study, made on first use."""
        if model not in self._studies:
            self._studies[model] = self._new_study(model, 0)
        return self._studies[model]

    def _new_study(self, model: str, generation: int):
        """A study for `model`'s trials, its sampler seeded for its `generation` (0, then each renewal)."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        spec = self.spec
        if generation and spec.seed is not None:
            spec = dataclasses.replace(spec, seed=spec.seed + generation)
        sampler = self.searcher.sampler(spec, model, self.spaces[model])
        pruner = (optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
                  if self.spec.pruning else None)  # over folds: `fold_scored`
        return optuna.create_study(direction=self.direction, sampler=sampler, pruner=pruner, study_name=model)

    def _asking_study(self, model: str):
        """The study `model`'s next trial is asked of. Where its finished trials reach twice the searcher's
        `study_window`, a new study takes its place holding the window: the best KEPT_BEST whole trials and
        the latest others, so that an ask's cost stays flat however many trials the budget runs (a sampler
        such as TPE reads every trial its study holds at each ask). The trials still running are told to
        the study that asked them, and join the new one as they end (`_tell`)."""
        from optuna.trial import TrialState

        study = self._study(model)
        window = getattr(self.searcher, "study_window", None)
        if window is None:
            return study
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        if len(finished) < 2 * window:
            return study
        whole = [t for t in finished if t.state == TrialState.COMPLETE]
        best = sorted(whole, key=lambda t: t.value, reverse=self.direction == "maximize")
        best = best[:min(KEPT_BEST, window)]
        numbers, room = {t.number for t in best}, window - len(best)
        latest = [t for t in finished if t.number not in numbers][-room:] if room else []
        generation = self._generations[model] = self._generations.get(model, 0) + 1
        renewed = self._new_study(model, generation)
        renewed.add_trials(best + latest)
        self._studies[model] = renewed
        log.debug("model %s: its study renewed after %d finished trials, with its %d best and %d latest",
                  model, len(finished), len(best), len(latest))
        return renewed

    def _tell(self, model: str, optuna_trial, *args, **kwargs) -> None:
        """Tell `optuna_trial` to the study that asked it; where `model`'s study was renewed since, the trial,
        finished whole or pruned, joins the current study too."""
        from optuna.trial import TrialState

        asked_by = optuna_trial.study
        tell_study(asked_by, optuna_trial, *args, **kwargs)
        current = self._studies.get(model)
        if current is not None and current is not asked_by:
            frozen = asked_by.get_trials(deepcopy=False)[optuna_trial.number]
            if frozen.state in (TrialState.COMPLETE, TrialState.PRUNED):
                current.add_trial(frozen)

    def _save(self, model: str, trial: int) -> None:
        """The trial just asked, appended to `<model>.jsonl` (a line per trial: O(1) per ask); the whole
        `<model>.json` is written again only when its count doubles, and by `flush` at the run's end."""
        if self.store_dir is None:
            return
        self._counts[model] = self._counts.get(model, 0) + 1
        self.store_dir.mkdir(parents=True, exist_ok=True)
        line = json.dumps({str(trial): self.asked[(model, trial)]}, default=str) + "\n"
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC  # never through a link
        fd = os.open(self.store_dir / f"{model}.jsonl", flags, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        count = self._counts[model]
        if count & (count - 1) == 0:
            self._snapshot(model)

    def flush(self) -> None:
        """Every model's `<model>.json`, whole: what a resumed run and its readers take."""
        for model in self._counts:
            self._snapshot(model)

    def _snapshot(self, model: str) -> None:
        mine = {str(t): p for (m, t), p in self.asked.items() if m == model}
        from pipeline.store import atomic_write_bytes  # it makes the folder too

        atomic_write_bytes(self.store_dir / f"{model}.json", json.dumps(mine, indent=2, default=str).encode())

    def _load_prior(self) -> dict:
        if self.store_dir is None or not self.store_dir.exists():
            return {}
        from pipeline.store import read_trials

        return read_trials(self.store_dir)


def in_space(params: dict, space: dict[str, SearchDimConf], where: str) -> dict:
    """The recorded parameters (of a resumed run's trial) that the search space holds; each one it does
    not (an unknown name, a value out of range or not a choice) is dropped, with a warning."""
    kept = {}
    for name, value in params.items():
        dim = space.get(name)
        try:
            distribution = dim.distribution() if dim is not None else None
            inside = distribution is not None and distribution._contains(distribution.to_internal_repr(value))
        except (TypeError, ValueError):
            inside = False
        if inside:
            kept[name] = value
        else:
            log.warning("%s: the recorded %s=%r is outside the search space (%s); dropped, the searcher "
                        "chooses it", where, name, value, "not searched" if dim is None else _bounds(dim))
    return kept


def _bounds(dim: SearchDimConf) -> str:
    return f"one of {dim.choices}" if dim.type == "categorical" else f"{dim.low} to {dim.high}"
