"""Components named by `_target_`: checked against `allowed_targets`, imported, and checked to be of the
kind the key takes, all before anything calls them.

A target is a module and one attribute of it (`pkg.mod.Name`): the module is imported, the attribute
read, nothing walked further, so `pipeline.store.shutil.copyfile` names no component. The allowed
modules are whole module names, and the object must be defined inside them, not merely re-exported there.
The composition root calls what `resolve` returns once every check has passed. Anywhere else in the
config a `_target_` is refused (`check_no_targets`): the engine never builds objects from values.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from pipeline.errors import ConfigError, closest
from pipeline.override_text import key_path, override_parts
from pipeline.redact import MASK, STORAGE_OPTIONS, is_secret_key, redact

ALWAYS_ALLOWED = ("pipeline.",)


@dataclass(frozen=True)
class Kind:
    """What a `_target_` must name: a subclass of `base` (a dotted name) or, where `functions`, a function."""

    base: str
    what: str  # how a message names it: "a model class"
    functions: bool = False


# The kinds of the keys the composition root resolves without saying which kind it wants.
KINDS = {
    "executor._target_": Kind("pipeline.graph.backend.Backend", "an executor", functions=True),
    "tracking._target_": Kind("pipeline.tracking.NullTracker", "a tracker", functions=True),
}


def module_names(allowed: tuple[str, ...]) -> tuple[str, ...]:
    """`allowed_targets` entries as module names: `my_pkg` and `my_pkg.` are both the module `my_pkg`."""
    return tuple(a.rstrip(".") for a in allowed)


def inside(module: str, allowed: tuple[str, ...]) -> bool:
    """Whether `module` is one of the allowed modules or below one (`my_pkg.sub`, never `my_pkgevil`)."""
    return any(module == name or module.startswith(name + ".") for name in module_names(allowed) if name)


def check_allowed(key: str, target: str, allowed: tuple[str, ...]) -> None:
    """A `_target_` must name something in one of the allowed modules (pipeline.* always is)."""
    module = str(target).rpartition(".")[0]
    if not inside(module, allowed):
        raise ConfigError(
            f"{key}={target!r} is outside the allowed modules ({', '.join(allowed)}); "
            "add its module to allowed_targets if you trust it"
        )


def load(key: str, target: str, allowed: tuple[str, ...]) -> object:
    """The object `target` names: inside the allowed modules, imported as a module plus one attribute."""
    check_allowed(key, target, allowed)
    module_name, _, attr = target.rpartition(".")
    if not attr.isidentifier():
        raise ConfigError(f"{key}={target!r} must name a class or function as module.Name")
    try:
        obj = imported(target)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{key}={target!r} cannot be imported: {exc}; name a class or function as "
                          "module.Name, in the module that defines it") from None
    home = getattr(obj, "__module__", None) if inspect.isclass(obj) or inspect.isfunction(obj) else None
    if not isinstance(home, str):
        raise ConfigError(f"{key}={target!r} is a {type(obj).__name__}, not a class or function")
    if not inside(home, allowed):
        raise ConfigError(f"{key}={target!r} is defined in {home}, outside the allowed modules "
                          f"({', '.join(allowed)}); name it where it is defined, in a module you allow")
    return obj


def imported(target: str) -> object:
    """The attribute `Name` of the module `pkg.mod` that `pkg.mod.Name` names (no attribute walking)."""
    module_name, _, attr = target.rpartition(".")
    return getattr(importlib.import_module(module_name), attr)


def check_kind(key: str, target: str, obj: object, kind: Kind) -> None:
    """A ConfigError unless `obj` is a subclass of kind.base or, where allowed, a function whose return
    annotation says it returns one (any other function would be called with the component's arguments)."""
    base_module, _, base_name = kind.base.rpartition(".")
    base = getattr(importlib.import_module(base_module), base_name)
    if inspect.isclass(obj) and issubclass(obj, base):
        return
    if kind.functions and inspect.isfunction(obj):
        returns = _return_type(obj)
        if inspect.isclass(returns) and issubclass(returns, base):
            return
        named = getattr(returns, "__name__", returns)
        said = "declares no return type" if returns is None else f"returns {named}"
        raise ConfigError(f"{key}={target!r} is a function that {said}, not {kind.what}: name a subclass of "
                          f"{kind.base}, or a function annotated to return one (-> {base_name})")
    valid = f"a subclass of {kind.base}" + (" or a function returning one" if kind.functions else "")
    raise ConfigError(f"{key}={target!r} is not {kind.what} ({valid})")


def _return_type(function) -> object:
    """What `function`'s return annotation names (None when it has none or names nothing importable)."""
    import typing

    try:
        return typing.get_type_hints(function).get("return")
    except Exception:  # noqa: BLE001  (a name only a type checker sees: not a declared type here)
        return None


def resolve(key: str, target: str, allowed: tuple[str, ...], kind: Optional[Kind] = None) -> Callable:
    """The class or function `target` names, of `kind` (by default the key's), not yet called."""
    obj = load(key, target, allowed)
    kind = kind or KINDS.get(key)
    if kind is not None:
        check_kind(key, target, obj, kind)
    return obj


def kind_of(component: object, target: str) -> str:
    """What a run's records call a component: its `kind` (the engine's: local, ray, tpe, ...), else
    the `_target_` that names it."""
    return getattr(component, "kind", None) or target


# Where a `_target_` names a component; anywhere else in the config it would only be a value.
COMPONENT_GROUPS = ("data", "hpo", "executor", "tracking")


def check_no_targets(tree, path: tuple = ()) -> None:
    """A mapping with a `_target_` is refused anywhere but a component's own group (model.<name>, data,
    hpo, executor, tracking): the engine never builds objects from values (model params, options)."""
    if isinstance(tree, dict):
        own = path in {(g,) for g in COMPONENT_GROUPS} or (len(path) == 2 and path[0] == "model")
        if "_target_" in tree and not own:
            key = ".".join(str(p) for p in path)
            secret = any(is_secret_key(str(p)) for p in path)
            shown = MASK if secret else redact(tree, "", STORAGE_OPTIONS in path)
            raise ConfigError(
                f"{key}={shown} holds a _target_: a value is never built into an object; give {key} a "
                "plain value (only model.<name>._target_, data._target_, hpo._target_, executor._target_ and "
                "tracking._target_ name components)"
            )
        for k, v in tree.items():
            check_no_targets(v, (*path, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            check_no_targets(v, (*path[:-1], f"{path[-1]}[{i}]") if path else (f"[{i}]",))


def check_allowed_targets(entries) -> tuple[str, ...]:
    """allowed_targets as given, each a dotted module name (`my_pkg` or `my_pkg.`)."""
    for entry in entries:
        if not (isinstance(entry, str) and all(part.isidentifier() for part in entry.rstrip(".").split("."))):
            raise ConfigError(f"allowed_targets: {entry!r} is not a module name; give whole module names "
                              "such as my_pkg or my_pkg.models")
    return tuple(entries)



# Keys that once named a component: its config group (or its `_target_`) names it now.
FORMER_NAME_KEYS = {
    "executor.name": ("executor", "my_pkg.MyBackend"),
    "tracking.backend": ("tracking", "my_pkg.MyTracker"),
    "data.source": ("data", "my_pkg.MySource"),
    "hpo.searcher": ("hpo", "my_pkg.MySearcher"),
}


def group_options(conf_dir: Path, group: str) -> list[str]:
    """The options of config group `group` under `conf_dir`, by name."""
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))


# Hydra's flags that choose another primary config, whose defaults may list hardware
PRIMARY_CONFIG_FLAGS = ("--config-name", "-cn", "--config-dir", "-cd", "--config-path", "-cp")


def check_overrides(overrides, conf_dir: Path) -> None:
    """A ConfigError for a command-line override of a key that once named a component
    (`executor.name=ray`), saying what names it now (`executor=ray`, or `executor._target_=...`);
    Hydra's own error would say only that the key is not in the schema. And one for a key under `hardware`
    with no profile appended, and for a model added or removed as a key (`check_hardware_overrides`,
    `check_model_overrides`)."""
    check_hardware_overrides(overrides, conf_dir)
    check_model_overrides(overrides, conf_dir)
    for override in overrides:
        if override.startswith("-"):
            continue
        key, value = override_parts(override)
        if key not in FORMER_NAME_KEYS:
            continue
        group, example = FORMER_NAME_KEYS[key]
        options = group_options(conf_dir, group)
        choose = (f"{group}={value}" if value in options else
                  f"one of {', '.join(f'{group}={o}' for o in options)}{closest(value, options)}")
        raise ConfigError(f"{key}={value!r}: {key} is not a key; the {group} component is named by its config "
                          f"group or its _target_: use {choose}, or {group}._target_={example} for your own "
                          "(its module in allowed_targets)")


def check_hardware_overrides(overrides, conf_dir: Path) -> None:
    """A ConfigError for a key under `hardware` (`hardware.num_gpus=2`) where no profile is appended: hardware
    is not in the defaults (the machine is detected), so there is no node to set it in, and Hydra stops with
    an AssertionError's traceback. The message names the profiles to append first."""
    if any(o.split("=")[0] in PRIMARY_CONFIG_FLAGS for o in overrides):
        return
    given = [o for o in overrides if not o.startswith("-")]
    keys = [override_parts(o)[0] for o in given]
    if "hardware" in keys:
        return
    under = [o for o, key in zip(given, keys) if key.startswith("hardware.")]
    if under:
        profiles = group_options(conf_dir, "hardware")
        first = under[0].lstrip("+~")
        raise ConfigError(f"{first}: hardware is not in the defaults (this machine is detected), so there is "
                          f"no {override_parts(first)[0]} to set; append a profile and set it over it: "
                          f"+hardware={profiles[0] if profiles else 'NAME'} {first} (profiles: "
                          f"{', '.join(profiles)})")


def check_model_overrides(overrides, conf_dir: Path) -> None:
    """A ConfigError for a model added as a key (`+model.catboost={...}`: OmegaConf refuses a mapping for a
    new key of the typed models) or set to null (`model.nn=null`), saying what adds or removes one: the model
    group's list (`model=[all,catboost]`, a kind of your own from a config dir on `hydra.searchpath`), or
    `~model.nn`."""
    for override in overrides:
        if override.startswith(("-", "~")):
            continue
        key, value = override_parts(override)
        path = key_path(override)
        if path[0] != "model" or len(path) != 2:
            continue
        name = path[1]
        if value.strip() == "null":
            raise ConfigError(f"{override}: a model is removed with ~model.{name}")
        # `++model.lightgbm={...}` merges into a model the group chose; `+` adds a key, which fails
        if override.startswith("+") and not override.startswith("++"):
            kinds = group_options(conf_dir, "model")
            listed = f"model=[all,{name}]" if name in kinds else "model=[all,my_kind]"
            raise ConfigError(f"{key}: a model is added through the model group, not as a key: {listed} adds "
                              f"it to the default models (kinds: {', '.join(kinds)}); a kind of your own is "
                              "my_conf/model/my_kind.yaml with hydra.searchpath=[file://my_conf]")

