"""The Optuna study and the ask/launch/tell loop behind `hydra/sweeper=optuna`.

With a launcher that can start jobs one by one (`launch_stream`, as `hydra/launcher=gpu` does), a
new trial is asked for as soon as a slot frees and told as soon as its job returns; with any other
launcher (or `schedule: batch`) trials go out in batches of `n_jobs`.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from hydra_plugins.pipeline_optuna_sweeper._results import write_results
from hydra_plugins.pipeline_optuna_sweeper._settings import (  # noqa: F401  (the plugin's public names)
    GRAMMAR_EXAMPLES,
    SweeperConfigError,
    SweepFailedError,
    _flatten,
)
from hydra_plugins.pipeline_optuna_sweeper._space import (  # noqa: F401
    SearchSpace,
    build_search_space,
    format_value,
    grid_size,
    make_sampler,
)
from hydra_plugins.pipeline_optuna_sweeper.config import OptunaSweeperConf  # noqa: F401
from pipeline.hpo import tell_study

log = logging.getLogger(__name__)


def sweep(sweeper, arguments: list[str]) -> list:
    """Ask, launch, tell until n_trials; write optimization_results.yaml in the sweep directory."""
    import optuna

    settings: OptunaSweeperConf = sweeper.settings
    config = sweeper.config
    parser = OverridesParser.create(config_loader=sweeper.hydra_context.config_loader)
    space = build_search_space(settings.params, list(arguments), parser)
    if not space.distributions:
        raise SweeperConfigError(
            "the Optuna sweeper has nothing to search: give hydra.sweeper.params.KEY or a sweep on the "
            "command line, such as 'model.lightgbm.params.learning_rate=tag(log, interval(0.01, 0.3))' "
            f"(forms: {GRAMMAR_EXAMPLES})"
        )
    objectives = _check_objectives(settings, config)
    n_trials = settings.n_trials
    if settings.sampler_name == "grid" and grid_size(space) < n_trials:
        log.warning(f"the grid holds {grid_size(space)} combination(s): running those, not "
                    f"hydra.sweeper.n_trials={n_trials}")
        n_trials = grid_size(space)
    study = _open_study(settings, space)

    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")
    stream = getattr(sweeper.launcher, "launch_stream", None)
    asynchronous = settings.schedule == "async" and stream is not None
    how = f"up to {settings.n_jobs} at a time" if asynchronous else f"in batches of {settings.n_jobs}"
    log.info(f"Study {study.study_name}: {settings.direction_text} over {', '.join(space.distributions)} "
             f"with {settings.sampler_name}, {n_trials} trial(s) {how}")
    for key, dist in space.distributions.items():
        log.info(f"\t{key}: {dist}")

    search = _Search(study, space, settings, sweeper, n_trials, str(sweep_dir))
    returns = search.run_streamed(stream) if asynchronous else search.run_batches()

    completed = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not completed:
        raise SweepFailedError(
            f"none of the {search.told} trial(s) finished with a score:\n  " + "\n  ".join(search.failures)
        )
    results_file = sweep_dir / "optimization_results.yaml"
    write_results(results_file, study, space, settings, objectives, search.told, len(search.failures))
    if settings.multi_objective:
        front = study.best_trials
        log.info(f"Pareto front ({settings.direction_text}): {len(front)} trial(s)")
        for trial in front:
            log.info(f"\ttrial {trial.number} values {trial.values} params {trial.params}")
    else:
        log.info(f"Best value ({settings.direction_text}): {study.best_trial.value}")
        log.info(f"Best parameters: {study.best_trial.params}")
    log.info(f"Results: {results_file}")
    return returns


def _check_objectives(settings: OptunaSweeperConf, config) -> Optional[list[str]]:
    """When the task's config says what a job returns (the pipeline's `objectives`, checked as the run
    checks it), refuse a direction list of another length before any job starts."""
    from pipeline.objectives import check

    objectives = OmegaConf.select(config, "objectives", default=None)
    if objectives is None or not OmegaConf.is_list(objectives):
        return None
    names = list(check([str(o) for o in objectives]))
    if len(names) != len(settings.directions):
        raise SweeperConfigError(
            f"hydra.sweeper.direction={settings.direction_text} names {len(settings.directions)} objective(s) "
            f"but objectives={names} makes each job return {len(names)} value(s); give one direction per "
            "objective, e.g. hydra.sweeper.direction=[maximize,minimize] objectives=[val_score,fit_seconds]"
        )
    return names


def _open_study(settings: OptunaSweeperConf, space: SearchSpace):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(
            storage=settings.storage, sampler=make_sampler(settings, space), study_name=settings.study_name,
            directions=list(settings.directions), load_if_exists=settings.study_name is not None,
        )
    except Exception as exc:  # a bad storage URL, an unreachable or foreign database
        raise SweeperConfigError(
            f"hydra.sweeper.storage={settings.storage!r}, hydra.sweeper.study_name={settings.study_name!r}: "
            f"Optuna could not create or load the study: {type(exc).__name__}: {exc}"
        ) from None
    stored = tuple(d.name.lower() for d in study.directions)
    if stored != settings.directions:
        shown = stored[0] if len(stored) == 1 else f"[{', '.join(stored)}]"
        raise SweeperConfigError(
            f"hydra.sweeper.direction={settings.direction_text} but the stored study {study.study_name!r} in "
            f"hydra.sweeper.storage={settings.storage!r} is set to {shown}; use {shown}, or another "
            "study_name"
        )
    previous = len(study.trials)
    if previous and settings.seed is not None:
        # The same seed on a resumed study would sample the same points again.
        study.sampler = make_sampler(settings, space, seed=settings.seed + previous)
        log.info(f"Study {study.study_name} holds {previous} trial(s): sampling with seed "
                 f"{settings.seed} + {previous} so this session does not repeat them")
    return study


class _Search:
    """Asks trials, hands their overrides to the launcher, tells Optuna what each job returned."""

    def __init__(self, study, space: SearchSpace, settings: OptunaSweeperConf, sweeper, n_trials: int, sweep_dir: str):
        self.study, self.space, self.settings, self.sweeper = study, space, settings, sweeper
        self.n_trials, self.sweep_dir = n_trials, sweep_dir
        self.asked = self.told = 0
        self.failures: list[str] = []

    def ask(self) -> tuple[int, Any, list[str]]:
        trial = self.study.ask(self.space.distributions)
        idx, self.asked = self.asked, self.asked + 1
        trial.set_user_attr("job", idx)  # optimization_results.yaml and MLflow find the trial's job by it
        trial.set_user_attr("sweep_dir", self.sweep_dir)
        return idx, trial, self.space.overrides(trial.params)

    def tell(self, idx: int, trial, overrides: Sequence[str], ret) -> None:
        import optuna

        values, problem = score(ret, len(self.settings.directions))
        self.told += 1
        if problem is None:
            tell_study(self.study, trial, values=values)
            shown = ", ".join(f"{v:.6g}" for v in values)
            log.info(f"\t#{idx} : trial {trial.number} value{'s' if len(values) > 1 else ''} {shown}")
        else:
            tell_study(self.study, trial, state=optuna.trial.TrialState.FAIL)
            self.failures.append(f"job #{idx} ({' '.join(overrides)}): {problem}")
            log.warning(f"\t#{idx} : trial {trial.number} failed: {problem}")

    def too_many_failures(self) -> bool:
        return bool(self.failures) and len(self.failures) / self.told > self.settings.max_failure_rate

    def stop_if_failing(self) -> None:
        if self.too_many_failures():
            raise SweepFailedError(
                f"{len(self.failures)} of {self.told} trial(s) failed, more than hydra.sweeper.max_failure_rate="
                f"{self.settings.max_failure_rate:g} allows:\n  " + "\n  ".join(self.failures)
            )

    def run_batches(self) -> list:
        """n_jobs trials per launch; each batch waits for its slowest job. Failures checked per batch."""
        returns = []
        while self.asked < self.n_trials:
            size = min(self.settings.n_jobs, self.n_trials - self.asked)
            asked = [self.ask() for _ in range(size)]
            batch = [overrides for _, _, overrides in asked]
            self.sweeper.validate_batch_is_legal(batch)
            results = self.sweeper.launcher.launch(batch, initial_job_idx=asked[0][0])
            for (idx, trial, overrides), ret in zip(asked, results, strict=True):
                self.tell(idx, trial, overrides, ret)
            returns.append(results)
            self.stop_if_failing()
        return returns

    def run_streamed(self, stream: Callable) -> list:
        """A trial is asked when a slot frees, so the sampler sees every result told so far. Past the
        failure rate no new trial starts; the running ones finish and are told."""
        running: dict[int, tuple[Any, list[str]]] = {}
        results: list = []

        def next_job() -> Optional[tuple[int, list[str]]]:
            if self.asked >= self.n_trials or self.too_many_failures():
                return None
            idx, trial, overrides = self.ask()
            self.sweeper.validate_batch_is_legal([overrides])
            running[idx] = (trial, overrides)
            return idx, overrides

        def on_return(idx: int, ret) -> None:
            trial, overrides = running.pop(idx)
            self.tell(idx, trial, overrides, ret)
            results.append(ret)

        stream(next_job, on_return, max_jobs=min(self.settings.n_jobs, self.n_trials))
        self.stop_if_failing()
        return [results]


def score(ret, count: int) -> tuple[Optional[list[float]], Optional[str]]:
    """The job's return value as `count` finite floats, or why it is not."""
    try:
        value = ret.return_value
    except Exception as exc:  # the job failed: return_value raises its error
        return None, f"{type(exc).__name__}: {exc}"
    if value is None:
        return None, "the job returned None, not a score (under dry_run=true the pipeline fits nothing)"
    values = list(value) if isinstance(value, (list, tuple)) or OmegaConf.is_list(value) else [value]
    if len(values) != count:
        return None, (
            f"the job returned {len(values)} value(s) ({value!r}) but hydra.sweeper.direction names {count} "
            "objective(s); make them match (the pipeline returns one value per entry of `objectives`)"
        )
    scores = []
    for v in values:
        try:
            s = float(v)
        except (TypeError, ValueError):
            return None, f"the job returned {value!r}, which is not a number" + ("s" if count > 1 else "")
        if not math.isfinite(s):
            return None, f"the job returned {value!r}: {s} is not a finite score"
        scores.append(s)
    return scores, None
