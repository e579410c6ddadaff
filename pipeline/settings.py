"""The run's settings, read once from the composed config by the composition root.

The config is the settings: OmegaConf.to_object builds the ConfigStore dataclasses of
`pipeline.config` and runs their checks, and this module adds the checks that span groups (models'
classes within allowed_targets, search spaces against the searcher, the data source's class). Code
below `pipeline.run` reads those dataclasses; it never sees a DictConfig.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from omegaconf import DictConfig, OmegaConf, open_dict

from pipeline.config import Config, DataConf, ModelSpecConf, PredictConfig, Resume, SearchDimConf
from pipeline.device_choice import check_device
from pipeline.errors import ConfigError
from pipeline.lean_imports import PRELOAD as LEAN_PRELOAD
from pipeline.memory.budget import MemoryRequest
from pipeline.objectives import check as check_objectives
from pipeline.redact import flatten, redact
from pipeline.resources import Request
from pipeline.graph.stacking import check as check_stacking
from pipeline.targets import ALWAYS_ALLOWED, Kind, check_allowed_targets, check_no_targets, inside, resolve

if TYPE_CHECKING:
    from pipeline.models.base import TabularModel


@dataclass(frozen=True)
class ModelSpec:
    """One configured model: its name under `model`, its checked config, and the class it names; once
    planned, the device the planner chose for it, whose library parameters `params` then holds."""

    name: str
    conf: ModelSpecConf  # its resources checked: conf.resources.request / .memory_request
    cls: type[TabularModel]
    device: Optional[str] = None  # cpu | cuda, once planned (pipeline.device_choice)

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

    @property
    def resources(self) -> Request:
        return self.conf.resources.request

    @property
    def memory(self) -> MemoryRequest:
        """The model's own memory_gb / gpu_memory_gb."""
        return self.conf.resources.memory_request

    def prototype(self) -> TabularModel:
        """A fresh model object; its params are values, never objects to build (see check_no_targets)."""
        import copy

        return self.cls(params=copy.deepcopy(self.params), name=self.name)


@dataclass(frozen=True)
class Settings:
    """The run's config after its one validation pass: `conf` holds every group as its ConfigStore dataclass
    (their checks run as OmegaConf builds them); beside it only what cannot be a config value: each model's
    class, `resume` typed, the allowed `_target_` prefixes, and the resolved, redacted config for MLflow."""

    conf: Config
    models: tuple[ModelSpec, ...]
    resume: Resume
    allowed_targets: tuple[str, ...]  # module prefixes a _target_ may name
    params: dict  # the resolved config, flattened and redacted, for MLflow
    config_yaml: str  # the resolved config, redacted

    def on_devices(self, devices: dict[str, str]) -> "Settings":
        """These settings with each model on its planned device ({model name: cpu | cuda})."""
        return dataclasses.replace(self, models=tuple(m.on(devices[m.name]) if m.name in devices else m
                                                      for m in self.models))

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
    return OmegaConf.to_object(cfg)


def values(cfg: DictConfig) -> dict:
    """The resolved config as plain containers, without `hydra`, checked to hold no `_target_` in a value."""
    tree = OmegaConf.to_container(cfg, resolve=True)
    tree.pop("hydra", None)
    check_no_targets(tree)
    return tree


def read_settings(cfg: DictConfig) -> Settings:
    """The one place that reads the config tree."""
    conf: Config = typed(cfg, Config)
    tree = values(cfg)
    allowed = ALWAYS_ALLOWED + check_allowed_targets(conf.allowed_targets)
    if not conf.model:
        raise ConfigError("model: no model is configured; pick one with model=lightgbm (or xgboost, nn, all)")
    models = tuple(_model_spec(name, spec, allowed) for name, spec in conf.model.items())
    if conf.hpo.seed is None:
        conf.hpo.seed = conf.seed
    check_component("hpo", conf.hpo._target_, allowed, "pipeline.searchers.Searcher", "a searcher class")
    conf.hpo.check({m.name: m.search_space for m in models})
    check_data(conf.data, allowed, conf.seed)
    conf.objectives = list(check_objectives(conf.objectives))
    check_stacking(conf.stack_levels, conf.parallelism.num_folds)
    redacted = redact(tree)
    return Settings(conf, models, Resume.parse(conf.resume), allowed, flatten(redacted),
                    OmegaConf.to_yaml(OmegaConf.create(redacted)))


def check_data(data: DataConf, allowed: tuple[str, ...], seed: int) -> None:
    """The data source's class within allowed_targets (loading runs its own checks); null data.seed
    is the run's."""
    if data.seed is None:
        data.seed = seed
    check_component("data", data._target_, allowed, "pipeline.data_sources.DataSource", "a data source class")


def check_component(key: str, target: str, allowed: tuple[str, ...], base: str, what: str = "") -> type:
    """The class `key._target_` names: inside allowed_targets, importable, a subclass of `base`."""
    return resolve(f"{key}._target_", target, allowed, Kind(base, what or "a class"))


def read_predict_settings(cfg: DictConfig) -> PredictConfig:
    """The one place that reads the `predict` config tree: its schema's dataclass, checked."""
    conf: PredictConfig = typed(cfg, PredictConfig)
    if conf.chunk_rows < 1:
        raise ConfigError(f"chunk_rows={conf.chunk_rows} must be at least 1")
    check_name("predictor", conf.predictor)
    if not conf.output.endswith((".csv", ".parquet", ".pq")):
        raise ConfigError(f"output={conf.output!r} must name a .csv or .parquet file")
    values(cfg)
    check_data(conf.data, ALWAYS_ALLOWED + check_allowed_targets(conf.allowed_targets), 0)
    return conf


NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def check_name(key: str, name: str) -> None:
    """A name that becomes a file's name (predictors/<model>.pkl, trials/<model>.json) is an identifier
    (letters, digits, _ and -): `../x` or `a/b` would write or read outside the run folder."""
    if not NAME.match(str(name)):
        raise ConfigError(f"{key}: {name!r} is not a name: it becomes a file name in the run folder, so "
                          "it must start with a letter or _ and hold only letters, digits, _ and - "
                          "(no /, no ..)")


def _model_spec(name: str, spec: ModelSpecConf, allowed: tuple[str, ...]) -> ModelSpec:
    key = f"model.{name}"
    check_name(key, name)
    cls = check_component(key, spec._target_, allowed, "pipeline.models.base.TabularModel", "a model class")
    spec.resources.check(f"{key}.resources")
    spec.device = check_device(spec.device, f"{key}.device")
    return ModelSpec(name, spec, cls)
