"""The run's settings, read once from the composed config by the composition root.

The config is the settings: OmegaConf.to_object builds the ConfigStore dataclasses of
`pipeline.config`, and `pipeline.config_checks` checks every value once, in one pass (each group's,
then those that span groups: models' classes within allowed_targets, search spaces against the
searcher, the data source's class). What the checks derive (parsed resources, a model's device, the
seeds a null inherits) the settings hold as new values, and the data source object, made once, beside
the config (no config object caches it); nothing is changed in place after the pass.
Code below `pipeline.run` reads those dataclasses; it never sees a DictConfig.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from pipeline import config_checks as checks
from pipeline.config import NO_SEARCH, Config, ModelSpecConf, PredictConfig, Resume, SearchDimConf, typed_dims
from pipeline.errors import ConfigError, closest
from pipeline.lean_imports import PRELOAD as LEAN_PRELOAD
from pipeline.memory.budget import MemoryRequest
from pipeline.objectives import check as check_objectives
from pipeline.override_text import key_path
from pipeline.planning.inputs import Levels
from pipeline.redact import flatten, redact
from pipeline.resources import Request
from pipeline.graph.stacking import check as check_stacking, folds_for as stacking_folds
from pipeline.targets import ALWAYS_ALLOWED, check_allowed_targets, check_no_targets, inside

if TYPE_CHECKING:
    from pipeline.data_sources import DataSource
    from pipeline.hardware import Machine
    from pipeline.models.base import TabularModel
    from pipeline.planning.inputs import PlanInput


@dataclass(frozen=True)
class ModelSpec:
    """One configured model: its name under `model`, its checked config, and the class it names; once
    planned, the device the planner chose for it, whose library parameters `params` then holds."""

    name: str
    conf: ModelSpecConf  # checked: its device lower-cased
    cls: type[TabularModel]
    resources: Request  # its own resources, checked (conf.resources parsed)
    memory: MemoryRequest  # its own memory_gb / gpu_memory_gb, checked
    device: Optional[str] = None  # cpu | cuda, once planned (pipeline.planning.device_choice)
    added: bool = False  # joined by hpo=auto (planning.budget.with_added_kinds), not of the user's config

    @property
    def params(self) -> dict:
        """The library's parameters: as configured before planning; on the chosen device after."""
        if self.device is None:
            return self.conf.params
        gpu = self.conf.gpu_params if self.device == "cuda" else {}
        return self.cls.on_device({**self.conf.params, **gpu}, self.device)

    @property
    def all_params(self) -> dict:
        """params with gpu_params laid over them: every parameter the model may be given, for checks."""
        return {**self.conf.params, **self.conf.gpu_params}

    def on(self, device: str) -> "ModelSpec":
        """This model placed on `device` (cpu or cuda)."""
        return dataclasses.replace(self, device=device)

    @property
    def search_space(self) -> dict[str, SearchDimConf]:
        return self.conf.search_space

    def prototype(self) -> TabularModel:
        """A fresh model object; its params are values, never objects to build (see check_no_targets)."""
        import copy

        return self.cls(params=copy.deepcopy(self.params), name=self.name)


@dataclass(frozen=True)
class Settings:
    """The run's config after its one validation pass (pipeline.config_checks): `conf` holds every group as
    its ConfigStore dataclass; beside it only what cannot be a config value: each model's class, the parsed
    levels, `resume` typed, the allowed `_target_` prefixes, the resolved, redacted config for MLflow, the
    executor's and the tracker's classes, and the data source object made from `conf.data`."""

    conf: Config
    models: tuple[ModelSpec, ...]
    levels: Levels  # parallelism's requests, checked
    resume: Resume
    allowed_targets: tuple[str, ...]  # module prefixes a _target_ may name
    params: dict  # the resolved config, flattened and redacted, for MLflow
    config_yaml: str  # the resolved config, redacted
    executor: Callable  # executor._target_, imported within allowed_targets; built once every check passed
    tracker: Callable  # tracking._target_, likewise
    source: DataSource  # conf.data's source, made once: the checks, planning, loading and tracking use it

    def plan_input(self, base_dir: Optional[Path] = None, machine: Optional[Machine] = None,
                   on_cluster: bool = False) -> PlanInput:
        """What planning reads, from these settings: the models and their trial counts, the levels, the
        data's shape (read from `base_dir`'s files), and `machine` (a cluster's, else this one, detected)."""
        from pipeline import hardware as hw
        from pipeline.memory.shape import data_shape
        from pipeline.planning.inputs import DataInput, ModelInput, PlanInput

        conf = self.conf
        machine = machine or hw.detect()
        shape = data_shape(conf.data, base_dir or Path.cwd(), self.source)
        data = DataInput(shape, conf.data.test_size, conf.data.val_size)
        models = tuple(ModelInput(s, conf.hpo.trials_for(s.name, s.search_space)) for s in self.models)
        return PlanInput(models, self.levels, data, machine, conf.hardware, self.lean_imports, conf.dry_run,
                         bool(conf.refit), conf.stack_levels, on_cluster)

    @property
    def library_modules(self) -> tuple[str, ...]:
        """The modules the run's models import to fit (each once, in model order)."""
        return tuple(dict.fromkeys(m for spec in self.models for m in spec.cls.profile.modules))

    @property
    def worker_modules(self) -> tuple[str, ...]:
        """What a fit process imports ahead of its first fit: in a lean run `pipeline.executors.lean_preload`
        first, then the libraries, then what their fits import."""
        imported_by_fits = (m for spec in self.models for m in spec.cls.profile.fit_imports)
        lean = (LEAN_PRELOAD,) if self.lean_imports else ()
        return tuple(dict.fromkeys((*lean, *self.library_modules, *imported_by_fits)))

    @property
    def lean_imports(self) -> bool:
        """Whether the run's processes import the model libraries without scikit-learn (pipeline.lean_imports):
        only where every class the run builds (models, data source, searcher, executor, tracker) is the
        engine's own, which never uses the libraries' scikit-learn estimators; a class of yours might."""
        conf = self.conf
        targets = [conf.data._target_, conf.hpo._target_, conf.executor._target_, conf.tracking._target_,
                   *(spec.conf._target_ for spec in self.models)]
        return all(inside(target, ALWAYS_ALLOWED) for target in targets)


def typed(cfg: DictConfig, schema: type):
    """The composed config as its schema's dataclasses (OmegaConf.to_object runs their checks)."""
    if "hydra" in cfg:
        cfg = cfg.copy()
        with open_dict(cfg):
            del cfg["hydra"]
    if OmegaConf.get_type(cfg) is not schema:  # composed without the schema in its defaults
        cfg = OmegaConf.merge(OmegaConf.structured(schema), cfg)
    check_known_keys(cfg)
    return OmegaConf.to_object(cfg)


def check_known_keys(node, path: str = "") -> None:
    """A ConfigError for a key that no schema holds where one types the node. Hydra's `+key=value` adds a key
    to a typed node (its own advice for a key that is not in the config: `+time_limit=60` for time_limit_s),
    and OmegaConf.to_object would keep it as a stray attribute that nothing reads: the run would go on
    without what was asked."""
    if isinstance(node, DictConfig):
        schema = OmegaConf.get_type(node)
        known = [f.name for f in dataclasses.fields(schema)] if dataclasses.is_dataclass(schema) else None
        for key in node.keys():
            where = f"{path}.{key}" if path else str(key)
            if known is not None and key not in known:
                value = node._get_node(key)
                value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value._value()
                raise ConfigError(f"{where}={value!r} is not a key of {path or 'the config'}"
                                  f"{closest(str(key), known)}; its keys: {', '.join(known)}")
            check_known_keys(node._get_node(key), where)
    elif isinstance(node, ListConfig):
        for index in range(len(node)):
            check_known_keys(node._get_node(index), f"{path}[{index}]")


def values(cfg: DictConfig) -> dict:
    """The resolved config as plain containers, without `hydra`, checked to hold no `_target_` in a value."""
    tree = OmegaConf.to_container(cfg, resolve=True)
    tree.pop("hydra", None)
    check_no_targets(tree)
    return tree


def overridden(group: str, overrides: tuple[str, ...]) -> bool:
    """Whether the command line set `group` or a key under it (`hpo=tpe`, `executor.in_process=never`)."""
    return any(key_path(o)[0] == group for o in overrides)


def searcher_chosen(overrides: tuple[str, ...]) -> bool:
    """Whether the command line chose the searcher (`hpo=tpe`, `hpo._target_=...`), not only set a key
    under it (`hpo.pruning=false`, which tunes the hpo=auto a time limit brings: pipeline.planning.budget)."""
    return any(key_path(o)[:2] in (["hpo"], ["hpo", "_target_"]) for o in overrides)


def hpo_keys_set(overrides: tuple[str, ...]) -> set[str]:
    """The keys under `hpo` the command line set: `hpo.pruning=false` -> {"pruning"}."""
    return {path[1] for path in map(key_path, overrides) if path[0] == "hpo" and len(path) > 1}


def hpo_left_to_budget(conf: Config, overrides: Optional[tuple[str, ...]]) -> bool:
    """Whether a time limit's hpo=auto takes the place of the config's hpo (pipeline.planning.budget):
    time_limit_s set, no searcher chosen on the command line, and the config's hpo=none with one trial or
    with its trial count set on the command line (then hpo=auto's ceiling)."""
    if conf.time_limit_s is None or overrides is None or searcher_chosen(overrides):
        return False
    trials_set = "num_trials" in hpo_keys_set(overrides)
    return conf.hpo._target_ == NO_SEARCH and (conf.hpo.num_trials == 1 or trials_set)


def models_chosen(overrides: tuple[str, ...]) -> bool:
    """Whether the command line chose the models: the group (`model=gbm`, `model=[lightgbm,nn]`) or a model
    replaced or removed (`++model.lightgbm={...}`, `~model.nn`; `+model.catboost=...` is refused before
    composing: pipeline.targets.check_model_overrides). A key below a model tunes it
    (`model.nn.params.max_epochs=500`, `+model.xgboost.params.max_bin=128`) and leaves the models as they
    were."""
    return any(path[0] == "model" and len(path) <= 2 for path in map(key_path, overrides))


def read_settings(cfg: DictConfig, overrides: Optional[tuple[str, ...]] = None) -> Settings:
    """The one place that reads the config tree, and checks it once (pipeline.config_checks). `overrides`:
    the command line's, where known, for what the engine derives when a group was left to it (stacking's
    folds when no parallelism was chosen)."""
    conf: Config = typed(cfg, Config)
    tree = values(cfg)
    levels = checks.check_values(conf)
    allowed = ALWAYS_ALLOWED + check_allowed_targets(conf.allowed_targets)
    if not conf.model:
        raise ConfigError("model: no model is configured; pick one with model=lightgbm (or xgboost, nn, all)")
    models = tuple(model_spec(name, spec, allowed) for name, spec in conf.model.items())
    hpo = dataclasses.replace(conf.hpo, seed=checks.seed_or(conf.hpo.seed, conf.seed))
    checks.check_component("hpo", hpo._target_, allowed, "pipeline.searchers.Searcher", "a searcher class")
    checks.check_search(hpo, {m.name: m.search_space for m in models},
                        budget_searches=hpo_left_to_budget(conf, overrides))
    checks.check_data_source(conf.data, allowed)
    data = dataclasses.replace(conf.data, seed=checks.seed_or(conf.data.seed, conf.seed))
    objectives = list(check_objectives(conf.objectives))
    parallelism = conf.parallelism
    folds = stacking_folds(conf.stack_levels, parallelism.num_folds)
    if folds is not None and overrides is not None and not overridden("parallelism", overrides):
        from pipeline import report

        parallelism = dataclasses.replace(parallelism, num_folds=folds)
        levels = checks.check_parallelism(parallelism)
        report.console.print(
            f"stack_levels={conf.stack_levels} with no parallelism chosen: each model is a {folds}-fold bag, "
            "which stacking needs (as AutoGluon's num_stack_levels turns bagging on); parallelism=... "
            "chooses your own", highlight=False)
    check_stacking(conf.stack_levels, parallelism.num_folds)
    executor, tracker = checks.check_executor_and_tracker(conf, allowed)
    conf = dataclasses.replace(conf, hpo=hpo, data=data, objectives=objectives, parallelism=parallelism)
    redacted = redact(tree)
    params = flatten(redacted)
    if "parallelism.num_folds" in params:  # as run, where derived above
        params["parallelism.num_folds"] = parallelism.num_folds
    return Settings(conf, models, levels, Resume.parse(conf.resume), allowed, params,
                    OmegaConf.to_yaml(OmegaConf.create(redacted)), executor, tracker, data.make_source())


def read_predict_settings(cfg: DictConfig) -> PredictConfig:
    """The one place that reads the `predict` config tree: its schema's dataclass, checked."""
    conf: PredictConfig = typed(cfg, PredictConfig)
    checks.check_data(conf.data)
    checks.check_tracking(conf.tracking)
    if conf.chunk_rows < 1:
        raise ConfigError(f"chunk_rows={conf.chunk_rows} must be at least 1")
    checks.check_name("predictor", conf.predictor)
    if not conf.output.endswith((".csv", ".parquet", ".pq")):
        raise ConfigError(f"output={conf.output!r} must name a .csv or .parquet file")
    values(cfg)
    checks.check_data_source(conf.data, ALWAYS_ALLOWED + check_allowed_targets(conf.allowed_targets))
    data = dataclasses.replace(conf.data, seed=checks.seed_or(conf.data.seed, 0))
    return dataclasses.replace(conf, data=data)


def model_spec(name: str, spec: ModelSpecConf, allowed: tuple[str, ...]) -> ModelSpec:
    """One configured model, its class and resources checked."""
    spec = dataclasses.replace(spec, search_space=typed_dims(f"model.{name}.search_space", spec.search_space))
    cls, resources, memory, device = checks.check_model(name, spec, allowed)
    return ModelSpec(name, dataclasses.replace(spec, device=device), cls, resources, memory)
