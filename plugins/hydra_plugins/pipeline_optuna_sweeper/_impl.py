"""Search-space parsing, the Optuna study and the batch loop behind `hydra/sweeper=optuna`."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, Transformer
from hydra.errors import CompactHydraException, OverrideParseException
from omegaconf import DictConfig, ListConfig, OmegaConf

from pipeline.errors import ConfigError
from pipeline.hpo import tell_study

log = logging.getLogger(__name__)

DIRECTIONS = ("maximize", "minimize")
SAMPLERS = ("tpe", "random", "grid")
GRAMMAR_EXAMPLES = (
    "interval(0.01, 0.3), tag(log, interval(1e-4, 0.1)), int(interval(8, 64)), range(1, 10), "
    "choice(a, b), a,b,c"
)


class SweeperConfigError(ConfigError, CompactHydraException):
    """A `hydra.sweeper.*` value is invalid (printed without a traceback)."""


class SweepFailedError(CompactHydraException):
    """Too many trials failed, or none finished."""


@dataclass(frozen=True)
class Settings:
    """The sweeper's validated options."""

    sampler: str
    seed: Optional[int]
    sampler_options: dict
    direction: str
    n_trials: int
    n_jobs: int
    storage: Optional[str]
    study_name: Optional[str]
    max_failure_rate: float
    params: dict[str, Any] = field(default_factory=dict)  # flat: dotted key -> override grammar


def read_settings(
    sampler, direction, n_trials, n_jobs, storage, study_name, max_failure_rate, params
) -> Settings:
    """Check every option; the messages name the key, the value and what is valid."""
    sampler = _plain(sampler) or {}
    if not isinstance(sampler, Mapping):
        raise SweeperConfigError(
            f"hydra.sweeper.sampler={sampler!r}: choose one with hydra/sweeper/sampler=tpe|random|grid"
        )
    name = sampler.get("name")
    if name not in SAMPLERS:
        raise SweeperConfigError(
            f"hydra.sweeper.sampler.name={name!r}: valid samplers are {', '.join(SAMPLERS)} "
            "(choose one with hydra/sweeper/sampler=NAME)"
        )
    seed = sampler.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise SweeperConfigError(
            f"hydra.sweeper.sampler.seed={seed!r}: give an integer, or null for a random seed"
        )
    options = {k: v for k, v in sampler.items() if k not in ("name", "seed")}
    startup = options.get("n_startup_trials")
    if startup is not None and (isinstance(startup, bool) or not isinstance(startup, int) or startup < 0):
        raise SweeperConfigError(f"hydra.sweeper.sampler.n_startup_trials={startup!r}: give an integer >= 0")
    if direction is None:
        raise SweeperConfigError(
            "hydra.sweeper.direction is not set: give maximize or minimize (the pipeline returns the best "
            "validation score: maximize roc_auc or accuracy, minimize rmse)"
        )
    if direction not in DIRECTIONS:
        raise SweeperConfigError(
            f"hydra.sweeper.direction={direction!r}: valid values are maximize and minimize"
        )
    for key, value in (("n_trials", n_trials), ("n_jobs", n_jobs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SweeperConfigError(f"hydra.sweeper.{key}={value!r}: give an integer >= 1")
    if isinstance(max_failure_rate, bool) or not isinstance(max_failure_rate, (int, float)) or not (
        0.0 <= max_failure_rate <= 1.0
    ):
        raise SweeperConfigError(
            f"hydra.sweeper.max_failure_rate={max_failure_rate!r}: give a fraction from 0.0 (stop at the "
            "first failed trial) to 1.0 (never stop)"
        )
    for key, value in (("storage", storage), ("study_name", study_name)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise SweeperConfigError(f"hydra.sweeper.{key}={value!r}: give a non-empty string or null")
    params = _plain(params)
    if params is not None and not isinstance(params, Mapping):
        raise SweeperConfigError(
            f"hydra.sweeper.params={params!r}: give a mapping from a config key to a search space, "
            f"e.g. model.lightgbm.params.num_leaves: int(interval(8, 64))"
        )
    return Settings(name, seed, options, direction, n_trials, n_jobs, storage, study_name,
                    float(max_failure_rate), _flatten(params or {}))


def _plain(value: Any) -> Any:
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _flatten(params: Mapping, prefix: str = "") -> dict[str, Any]:
    """{'model': {'lightgbm': {'params': {'lr': ...}}}} -> {'model.lightgbm.params.lr': ...}.

    `hydra.sweeper.params.model.lightgbm.params.lr=...` on the command line nests like that.
    """
    flat = {}
    for key, value in params.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, path + "."))
        elif isinstance(value, (list, tuple)):
            raise SweeperConfigError(
                f"hydra.sweeper.params.{path}={value!r}: give the search space as one override-grammar "
                f"string, e.g. choice({', '.join(map(str, value))}) (forms: {GRAMMAR_EXAMPLES})"
            )
        else:
            flat[path] = value
    return flat


# --------------------------------------------------------------------------- search space


@dataclass
class SearchSpace:
    """Distributions to sample, keyed by override key, and the overrides every trial gets as they are."""

    distributions: dict[str, Any] = field(default_factory=dict)
    fixed: dict[str, str] = field(default_factory=dict)  # identity -> override line

    def overrides(self, params: Mapping[str, Any]) -> list[str]:
        sampled = [f"{key}={format_value(params[key])}" for key in self.distributions]
        return list(self.fixed.values()) + sampled


def format_value(value: Any) -> str:
    """A sampled value as override grammar (strings escaped, lists in brackets)."""
    return Transformer.str(value)


def build_search_space(
    params: Mapping[str, Any], arguments: list[str], parser: OverridesParser
) -> SearchSpace:
    """Sweeps in hydra.sweeper.params and on the command line become distributions; plain overrides
    are passed to every trial. The command line wins over hydra.sweeper.params for the same key."""
    space = SearchSpace()
    keys: dict[str, str] = {}  # identity -> the override key as written (with + or @package)
    for key, value in params.items():
        origin = f"hydra.sweeper.params.{key}"
        text = f"{key}={_value_text(value)}"
        try:
            (override,) = parser.parse_overrides([text])
        except OverrideParseException as exc:
            raise SweeperConfigError(
                f"{origin}={value!r} is not a valid search space: {exc.message.strip()}. "
                f"Forms: {GRAMMAR_EXAMPLES}"
            ) from None
        _add(space, keys, override, origin)
    for argument in arguments:
        (override,) = parser.parse_overrides([argument])  # Hydra has checked the command line already
        identity = _identity(override)
        if identity in keys:
            log.info(f"{override.input_line}: the command line replaces hydra.sweeper.params.{identity}")
            space.distributions.pop(keys[identity], None)
            space.fixed.pop(identity, None)
        _add(space, keys, override, f"the command line's {override.input_line!r}")
    return space


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return Transformer.str(value)


def _identity(override: Override) -> str:
    return override.key_or_group + (f"@{override.package}" if override.package else "")


def _add(space: SearchSpace, keys: dict[str, str], override: Override, origin: str) -> None:
    import optuna.distributions as d

    identity, key = _identity(override), override.get_key_element()
    keys[identity] = key
    if not override.is_sweep_override():
        space.fixed[identity] = override.input_line
        return
    if override.is_choice_sweep() or override.is_range_sweep():
        choices = list(override.sweep_iterator(transformer=Transformer.encode))
        if not choices:
            raise SweeperConfigError(f"{origin}: {override.input_line!r} holds no value to choose from")
        if len(set(map(repr, choices))) != len(choices):
            raise SweeperConfigError(f"{origin}: {override.input_line!r} lists a value more than once")
        space.distributions[key] = d.CategoricalDistribution(choices)
        return
    if override.is_interval_sweep():
        sweep = override.value()
        unknown = set(sweep.tags) - {"log"}
        if unknown:
            raise SweeperConfigError(
                f"{origin}: {override.input_line!r} has tag(s) {sorted(unknown)}; the only tag understood "
                "is log, as in tag(log, interval(0.001, 0.1))"
            )
        low, high, log_scale = sweep.start, sweep.end, "log" in sweep.tags
        if not low < high:
            raise SweeperConfigError(
                f"{origin}: {override.input_line!r} is empty; the start must be below the end"
            )
        if log_scale and low <= 0:
            raise SweeperConfigError(
                f"{origin}: {override.input_line!r} is on a log scale, so its start must be > 0 (got {low})"
            )
        if isinstance(low, int) and isinstance(high, int):
            space.distributions[key] = d.IntDistribution(low, high, log=log_scale)
        else:
            space.distributions[key] = d.FloatDistribution(float(low), float(high), log=log_scale)
        return
    raise SweeperConfigError(
        f"{origin}: {override.input_line!r} is a sweep the Optuna sweeper cannot sample; "
        f"forms: {GRAMMAR_EXAMPLES}"
    )


# --------------------------------------------------------------------------- the sweep


def make_sampler(settings: Settings, space: SearchSpace, seed: Optional[int] = None):
    """The configured sampler; `seed` replaces the configured seed."""
    import optuna

    seed = settings.seed if seed is None else seed
    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if settings.sampler == "grid":
        grid = {}
        for key, dist in space.distributions.items():
            if not isinstance(dist, optuna.distributions.CategoricalDistribution):
                raise SweeperConfigError(
                    f"hydra/sweeper/sampler=grid needs a finite set of values for every param, but {key} "
                    "is a continuous interval; give it as choice(...) or range(...)"
                )
            grid[key] = list(dist.choices)
        return optuna.samplers.GridSampler(grid, seed=seed)
    options = {k: v for k, v in settings.sampler_options.items() if v is not None}
    return optuna.samplers.TPESampler(seed=seed, **options)


def grid_size(space: SearchSpace) -> int:
    return math.prod(len(dist.choices) for dist in space.distributions.values())


def sweep(sweeper, arguments: list[str]) -> list:
    """Ask, launch, tell, batch after batch; write optimization_results.yaml in the sweep directory."""
    import optuna

    settings: Settings = sweeper.settings
    config = sweeper.config
    parser = OverridesParser.create(config_loader=sweeper.hydra_context.config_loader)
    space = build_search_space(settings.params, list(arguments), parser)
    if not space.distributions:
        raise SweeperConfigError(
            "the Optuna sweeper has nothing to search: give hydra.sweeper.params.KEY or a sweep on the "
            "command line, such as 'model.lightgbm.params.learning_rate=tag(log, interval(0.01, 0.3))' "
            f"(forms: {GRAMMAR_EXAMPLES})"
        )
    sampler = make_sampler(settings, space)
    n_trials = settings.n_trials
    if settings.sampler == "grid" and grid_size(space) < n_trials:
        log.warning(f"the grid holds {grid_size(space)} combination(s): running those, not "
                    f"hydra.sweeper.n_trials={n_trials}")
        n_trials = grid_size(space)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(
            storage=settings.storage, sampler=sampler, study_name=settings.study_name,
            direction=settings.direction, load_if_exists=settings.study_name is not None,
        )
    except Exception as exc:  # a bad storage URL, an unreachable or foreign database
        raise SweeperConfigError(
            f"hydra.sweeper.storage={settings.storage!r}, hydra.sweeper.study_name={settings.study_name!r}: "
            f"Optuna could not create or load the study: {type(exc).__name__}: {exc}"
        ) from None

    stored = study.direction.name.lower()
    if stored != settings.direction:
        raise SweeperConfigError(
            f"hydra.sweeper.direction={settings.direction} but the stored study {study.study_name!r} in "
            f"hydra.sweeper.storage={settings.storage!r} is set to {stored}; use {stored}, or another "
            "study_name"
        )
    previous = len(study.trials)
    if previous and settings.seed is not None:
        # The same seed on a resumed study would sample the same points again.
        study.sampler = make_sampler(settings, space, seed=settings.seed + previous)
        log.info(f"Study {study.study_name} holds {previous} trial(s): sampling with seed "
                 f"{settings.seed} + {previous} so this session does not repeat them")

    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")
    log.info(f"Study {study.study_name}: {settings.direction} over {', '.join(space.distributions)} with "
             f"{settings.sampler}, {n_trials} trial(s) in batches of {settings.n_jobs}")
    for key, dist in space.distributions.items():
        log.info(f"\t{key}: {dist}")

    returns = []
    done, failures, job_idx = 0, [], 0
    while done < n_trials:
        size = min(settings.n_jobs, n_trials - done)
        trials = [study.ask(space.distributions) for _ in range(size)]
        batch = [space.overrides(trial.params) for trial in trials]
        sweeper.validate_batch_is_legal(batch)
        results = sweeper.launcher.launch(batch, initial_job_idx=job_idx)
        for pos, (trial, overrides, ret) in enumerate(zip(trials, batch, results, strict=True)):
            value, problem = _score(ret)
            if problem is None:
                tell_study(study, trial, values=value)
                log.info(f"\t#{job_idx + pos} : trial {trial.number} value {value:.6g}")
            else:
                tell_study(study, trial, state=optuna.trial.TrialState.FAIL)
                failures.append(f"job #{job_idx + pos} ({' '.join(overrides)}): {problem}")
                log.warning(f"\t#{job_idx + pos} : trial {trial.number} failed: {problem}")
        job_idx += len(results)
        done += size
        returns.append(results)
        if failures and len(failures) / done > settings.max_failure_rate:
            raise SweepFailedError(
                f"{len(failures)} of {done} trial(s) failed, more than hydra.sweeper.max_failure_rate="
                f"{settings.max_failure_rate:g} allows:\n  " + "\n  ".join(failures)
            )

    completed = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not completed:
        raise SweepFailedError(
            f"none of the {done} trial(s) finished with a score:\n  " + "\n  ".join(failures)
        )
    best = study.best_trial
    results_file = sweep_dir / "optimization_results.yaml"
    _write_results(results_file, study, best, space, settings, done, len(failures))
    log.info(f"Best value ({settings.direction}): {best.value}")
    log.info(f"Best parameters: {best.params}")
    log.info(f"Results: {results_file}")
    return returns


def _score(ret) -> tuple[Optional[float], Optional[str]]:
    """The job's return value as a float, or why it is not one."""
    try:
        value = ret.return_value
    except Exception as exc:  # the job failed: return_value raises its error
        return None, f"{type(exc).__name__}: {exc}"
    if value is None:
        return None, "the job returned None, not a score (under dry_run=true the pipeline fits nothing)"
    try:
        score = float(value)
    except (TypeError, ValueError):
        return None, f"the job returned {value!r}, which is not a number"
    if not math.isfinite(score):
        return None, f"the job returned {score}, which is not a finite score"
    return score, None


def _write_results(
    path: Path, study, best, space: SearchSpace, settings: Settings, done: int, failed: int
) -> None:
    import yaml

    params = {k: _yaml_value(v) for k, v in best.params.items()}
    data = {
        "name": "optuna",
        "study_name": study.study_name,
        "direction": settings.direction,
        "best_value": float(best.value),
        "best_params": params,
        "best_overrides": list(space.fixed.values())
        + [f"{k}={format_value(v)}" for k, v in best.params.items()],
        "best_trial": best.number,
        "n_trials": done,
        "n_failed": failed,
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _yaml_value(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)
