"""Search spaces from Hydra's override grammar, and the Optuna sampler that draws from them."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, Transformer
from hydra.errors import OverrideParseException

from hydra_plugins.pipeline_optuna_sweeper._settings import GRAMMAR_EXAMPLES, SweeperConfigError
from hydra_plugins.pipeline_optuna_sweeper.config import OptunaSweeperConf

log = logging.getLogger(__name__)


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


def make_sampler(settings: OptunaSweeperConf, space: SearchSpace, seed: Optional[int] = None):
    """The configured sampler; `seed` replaces the configured seed."""
    import optuna

    seed = settings.seed if seed is None else seed
    if settings.sampler_name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if settings.sampler_name == "grid":
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

