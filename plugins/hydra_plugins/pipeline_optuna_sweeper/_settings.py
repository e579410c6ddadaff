"""The Optuna sweeper's options, checked before any trial starts."""

from __future__ import annotations

from typing import Any, Mapping

from hydra.errors import CompactHydraException
from omegaconf import DictConfig, ListConfig, OmegaConf

from pipeline.errors import ConfigError

DIRECTIONS = ("maximize", "minimize")
SAMPLERS = ("tpe", "random", "grid")
SCHEDULES = ("async", "batch")
GRAMMAR_EXAMPLES = (
    "interval(0.01, 0.3), tag(log, interval(1e-4, 0.1)), int(interval(8, 64)), range(1, 10), "
    "choice(a, b), a,b,c"
)


class SweeperConfigError(ConfigError, CompactHydraException):
    """A `hydra.sweeper.*` value is invalid (printed without a traceback)."""


class SweepFailedError(CompactHydraException):
    """Too many trials failed, or none finished."""


def check(conf) -> None:
    """Check every option of an OptunaSweeperConf (which calls this as it is built); sampler and direction
    become plain values, params a flat mapping."""
    sampler = _plain(conf.sampler) or {}
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
    startup = sampler.get("n_startup_trials")
    if startup is not None and (isinstance(startup, bool) or not isinstance(startup, int) or startup < 0):
        raise SweeperConfigError(f"hydra.sweeper.sampler.n_startup_trials={startup!r}: give an integer >= 0")
    direction = _plain(conf.direction)
    _directions(direction)
    for key in ("n_trials", "n_jobs"):
        value = getattr(conf, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SweeperConfigError(f"hydra.sweeper.{key}={value!r}: give an integer >= 1")
    rate = conf.max_failure_rate
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (0.0 <= rate <= 1.0):
        raise SweeperConfigError(
            f"hydra.sweeper.max_failure_rate={rate!r}: give a fraction from 0.0 (stop at the "
            "first failed trial) to 1.0 (never stop)"
        )
    for key in ("storage", "study_name"):
        value = getattr(conf, key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise SweeperConfigError(f"hydra.sweeper.{key}={value!r}: give a non-empty string or null")
    if conf.schedule not in SCHEDULES:
        raise SweeperConfigError(
            f"hydra.sweeper.schedule={conf.schedule!r}: valid values are async (a new trial starts as soon as a "
            "launcher slot frees) and batch (n_jobs trials at a time, each batch waits for its slowest)"
        )
    params = _plain(conf.params)
    if params is not None and not isinstance(params, Mapping):
        raise SweeperConfigError(
            f"hydra.sweeper.params={params!r}: give a mapping from a config key to a search space, "
            f"e.g. model.lightgbm.params.num_leaves: int(interval(8, 64))"
        )
    conf.sampler, conf.direction = dict(sampler), direction
    conf.max_failure_rate = float(rate)
    conf.params = _flatten(params or {})


def _directions(direction: Any) -> tuple[str, ...]:
    """`maximize`, or one direction per objective: `[maximize, minimize]`."""
    if direction is None:
        raise SweeperConfigError(
            "hydra.sweeper.direction is not set: give maximize or minimize (the pipeline returns the best "
            "validation score: maximize roc_auc or accuracy, minimize rmse), or a list such as "
            "[maximize, minimize] for several objectives"
        )
    values = list(direction) if isinstance(direction, (list, tuple)) else [direction]
    if not values or any(v not in DIRECTIONS for v in values):
        raise SweeperConfigError(
            f"hydra.sweeper.direction={direction!r}: give maximize or minimize, or a list of them with one "
            "entry per objective the job returns, e.g. [maximize, minimize]"
        )
    return tuple(values)


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
