"""Components named by `_target_`: checked against `allowed_targets`, then resolved by Hydra's instantiate.

Resolving imports the target and nothing more: the composition root calls what it returns once every
check has passed, with the typed values the component needs.
"""

from __future__ import annotations

from typing import Callable, Optional

from pipeline.errors import ConfigError, closest

ALWAYS_ALLOWED = ("pipeline.",)


def check_allowed(key: str, target: str, allowed: tuple[str, ...]) -> None:
    """A `_target_` must start with one of the allowed module prefixes (pipeline.* always is)."""
    if not any(target.startswith(prefix) for prefix in allowed):
        raise ConfigError(
            f"{key}={target!r} is outside the allowed modules ({', '.join(allowed)}); "
            "add its module prefix to allowed_targets if you trust it"
        )


def resolve(key: str, target: str, allowed: tuple[str, ...]) -> Callable:
    """The callable `target` names, imported through hydra.utils.instantiate (`_partial_`), not yet called."""
    check_allowed(key, target, allowed)
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate({"_target_": target, "_partial_": True})
    except InstantiationException as exc:
        reason = (str(exc).strip().splitlines() or [""])[-1]
        raise ConfigError(f"{key}={target!r} cannot be imported: {reason}") from None


def target_or_builtin(key: str, name: str, target: Optional[str], builtins: dict[str, str]) -> str:
    """`target` when one is given, else the engine's own component called `name` (the value of `key`)."""
    if target is not None:
        return target
    if name not in builtins:
        group = key.rpartition(".")[0]
        raise ConfigError(f"{key}={name!r} is not one of {', '.join(builtins)}{closest(name, builtins)}; "
                          f"to use your own, set {group}._target_")
    return builtins[name]
