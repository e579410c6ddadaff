"""Every check of the config's values, in one place: `pipeline.settings.read_settings` runs them once,
in this order, as the settings are read and before anything starts. First each group's own values (in
the order the schema builds the groups: data, parallelism, hpo, executor, tracking, then the time
limits), then what spans groups (each model, the searcher and its search spaces, the data source, the
executor and the tracker: within allowed_targets). The checks change nothing: what they derive (parsed
requests, a model's device, the targets' classes) they return, and the settings hold it as new values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from pipeline.components import BUNDLED, BUNDLED_SOURCE, PROBLEM_TYPES, UNSEEN_POLICIES, one_of
from pipeline.config import IN_PROCESS, LOCAL_EXECUTOR, NO_TRACKER
from pipeline.errors import ConfigError, closest
from pipeline.memory.budget import MemoryRequest
from pipeline.accelerators import check_device
from pipeline.planning.inputs import Levels
from pipeline.resources import Request
from pipeline.targets import Kind, resolve

if TYPE_CHECKING:
    from pipeline.config import (
        Config, DataConf, ExecutorConf, HpoConf, ModelSpecConf, ParallelismConf, ResourcesConf, SearchDimConf,
        TrackingConf,
    )


def check_values(conf: Config) -> Levels:
    """Each group's own values; returns parallelism's levels, parsed."""
    check_data(conf.data)
    levels = check_parallelism(conf.parallelism)
    check_hpo(conf.hpo)
    check_executor(conf.executor)
    check_tracking(conf.tracking)
    check_limits(conf)
    return levels


def check_data(data: DataConf) -> None:
    one_of("data.problem_type", data.problem_type, PROBLEM_TYPES)
    one_of("data.unseen_categories", data.unseen_categories, UNSEEN_POLICIES)
    from pipeline import class_weights

    class_weights.check(data.class_weight, data.problem_type)
    for key in ("test_size", "val_size"):
        value = getattr(data, key)
        if not 0 < value < 1:
            raise ConfigError(f"data.{key}={value} must be a fraction between 0 and 1")
    if data.max_rows is not None and data.max_rows < 10:
        raise ConfigError(f"data.max_rows={data.max_rows} must be at least 10")
    from pipeline.roles import check_overrides

    check_overrides(data.column_roles, data.leak_check)
    one_of("data.split", data.split, ("random", "time"))
    if data.split == "time" and not data.time_column:
        raise ConfigError("data.split=time needs data.time_column: the column that orders the rows")
    if data._target_ == BUNDLED_SOURCE and data.path not in BUNDLED:
        raise ConfigError(f"data.path={data.path!r} is not a bundled data set; bundled: "
                          f"{', '.join(BUNDLED)}{closest(str(data.path), tuple(BUNDLED))}; "
                          "for your own file add data=csv or data=parquet")


def check_resources(conf: ResourcesConf, key: str) -> tuple[Request, MemoryRequest]:
    """The values under `key` (parallelism.fit, model.lightgbm.resources): the CPUs and exact GPU share,
    and the memory in bytes."""
    return (Request.parse(conf.num_cpus, conf.num_gpus, key),
            MemoryRequest.parse(conf.memory_gb, conf.gpu_memory_gb, key))


def check_parallelism(par: ParallelismConf) -> Levels:
    bag, bag_memory = check_resources(par.bag, "parallelism.bag")
    fit, fit_memory = check_resources(par.fit, "parallelism.fit")
    return Levels(par.num_folds, bag, fit, bag_memory, fit_memory, par.sequential)


def check_hpo(hpo: HpoConf) -> None:
    if hpo.num_trials < 1:
        raise ConfigError(f"hpo.num_trials={hpo.num_trials} must be >= 1")
    if hpo.grid_points < 2:
        raise ConfigError(f"hpo.grid_points={hpo.grid_points} must be >= 2")


def check_executor(ex: ExecutorConf) -> None:
    if ex.in_process not in IN_PROCESS:
        raise ConfigError(f"executor.in_process={ex.in_process!r} is not one of {', '.join(IN_PROCESS)}")
    if ex.max_retries < 0:
        raise ConfigError(f"executor.max_retries={ex.max_retries} must be >= 0")
    timeout = ex.task_timeout_s
    if timeout is not None and not timeout > 0:
        raise ConfigError(f"executor.task_timeout_s={timeout} must be > 0 seconds (or null: no limit)")
    if timeout is not None and ex._target_ == LOCAL_EXECUTOR and ex.in_process == "always":
        raise ConfigError(
            f"executor.task_timeout_s={timeout} needs fits in worker processes, which can be stopped, but "
            "executor.in_process=always fits in the driver; use in_process=auto or never"
        )


def check_tracking(t: TrackingConf) -> None:
    if t.system_metrics_interval_s <= 0:
        raise ConfigError(f"tracking.system_metrics_interval_s={t.system_metrics_interval_s} must be > 0")
    if t.register_model is not None and t._target_ == NO_TRACKER:
        raise ConfigError(f"tracking.register_model={t.register_model!r} needs MLflow tracking: "
                          "drop tracking=none, or drop tracking.register_model")
    if t.register_model is not None and not t.log_models:
        raise ConfigError(f"tracking.register_model={t.register_model!r} registers a logged model, but "
                          "tracking.log_models=false logs none; set tracking.log_models=true")
    if not 0 < t.ui_port < 65536:
        raise ConfigError(f"tracking.ui_port={t.ui_port} must be a TCP port, 1 to 65535")
    if t.timeout_s <= 0:
        raise ConfigError(f"tracking.timeout_s={t.timeout_s} must be > 0")
    if t.keep_alive_s < 0:
        raise ConfigError(f"tracking.keep_alive_s={t.keep_alive_s} must be >= 0 seconds (0: no tracker "
                          "service, every run imports MLflow in a process of its own)")


def check_limits(conf: Config) -> None:
    for key in ("time_limit_s", "fit_time_limit_s"):
        limit = getattr(conf, key)
        if limit is not None and not (0 < limit < float("inf")):
            raise ConfigError(f"{key}={limit!r} must be a positive number of seconds (e.g. {key}=60), "
                              "or null: no time limit")
    if conf.time_limit_s is not None and conf.fit_time_limit_s is not None:
        raise ConfigError(f"time_limit_s={conf.time_limit_s:g} and fit_time_limit_s={conf.fit_time_limit_s:g} are "
                          "both set: time_limit_s bounds the whole run, fit_time_limit_s the fits alone; set one")


def check_search(hpo: HpoConf, spaces: dict[str, dict[str, SearchDimConf]],
                 budget_searches: bool = False) -> None:
    """The search spaces against the searcher (its class already checked): each dimension valid, none
    empty when searching (the schema's own checks: HpoConf.check, SearchDimConf.check). `budget_searches`:
    a time limit's hpo=auto replaces hpo=none, so hpo=none's trials are not said to repeat its params."""
    hpo.check(spaces, budget_searches)


def check_component(key: str, target: str, allowed: tuple[str, ...], base: str, what: str = "") -> type:
    """The class `key._target_` names: inside allowed_targets, importable, a subclass of `base`."""
    return resolve(f"{key}._target_", target, allowed, Kind(base, what or "a class"))


def check_data_source(data: DataConf, allowed: tuple[str, ...]) -> None:
    """The data source's class within allowed_targets (loading runs its own checks)."""
    check_component("data", data._target_, allowed, "pipeline.data_sources.DataSource", "a data source class")


def check_executor_and_tracker(conf: Config, allowed: tuple[str, ...]) -> tuple[Callable, Callable]:
    """`executor._target_` and `tracking._target_`: within allowed_targets, imported (what they build is
    checked when it is built, once every check has passed)."""
    return (resolve("executor._target_", conf.executor._target_, allowed),
            resolve("tracking._target_", conf.tracking._target_, allowed))


def check_model(name: str, spec: ModelSpecConf,
                allowed: tuple[str, ...]) -> tuple[type, Request, MemoryRequest, str]:
    """`model.<name>` (a ModelSpecConf): its name, its class within allowed_targets, its resources and its
    device; returns the class, the parsed resources and the device, lower-cased."""
    key = f"model.{name}"
    check_name(key, name)
    cls = check_component(key, spec._target_, allowed, "pipeline.models.base.TabularModel", "a model class")
    request, memory = check_resources(spec.resources, f"{key}.resources")
    return cls, request, memory, check_device(spec.device, f"{key}.device", cls.profile)


def check_name(key: str, name: str) -> None:
    """A name that becomes a file's name (predictors/<model>.pkl, trials/<model>.json) is an identifier
    (letters, digits, _ and -): `../x` or `a/b` would write or read outside the run folder."""
    import re

    if not re.match(r"^[A-Za-z_][A-Za-z0-9_-]*$", str(name)):
        raise ConfigError(f"{key}: {name!r} is not a name: it becomes a file name in the run folder, so "
                          "it must start with a letter or _ and hold only letters, digits, _ and - "
                          "(no /, no ..)")


def seed_or(value: Optional[int], seed: int) -> int:
    """A null seed is the run's."""
    return seed if value is None else value
