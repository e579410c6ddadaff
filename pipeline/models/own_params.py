"""Checks of a kind whose params are all its own (the linear model, k nearest neighbours): each key one it
takes, counts whole numbers >= 1, choices among their values."""

from __future__ import annotations

from pipeline.errors import ConfigError, closest


def checked(name: str, params: dict, own: dict, what: str, whole: tuple[str, ...] = (),
            choices: tuple[tuple[str, tuple], ...] = ()) -> dict:
    """`own` with `params` laid over it, once every key of `params` is in `own` (else the closest is named,
    `what` naming the kind), each key of `whole` is a whole number >= 1, and each (key, valid values) of
    `choices` holds one of them."""
    for key in params:
        if key not in own:
            raise ConfigError(f"model.{name}.params.{key} is not a parameter of {what}"
                              f"{closest(key, set(own))}")
    merged = {**own, **params}
    for key in whole:
        if not isinstance(merged[key], int) or isinstance(merged[key], bool) or merged[key] < 1:
            raise ConfigError(f"model.{name}.params.{key}={merged[key]!r} must be a whole number >= 1")
    for key, valid in choices:
        if merged[key] not in valid:
            raise ConfigError(f"model.{name}.params.{key}={merged[key]!r} must be one of {', '.join(valid)}")
    return merged
