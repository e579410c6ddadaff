"""Typed settings of a run, read once from the composed config by the composition root.

The groups are the ConfigStore dataclasses of `pipeline.config`: OmegaConf.to_object builds them
and runs their checks. This module adds the checks that span groups and the values derived from
them (resource requests, model classes). Nothing below `pipeline.run` sees a DictConfig.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from omegaconf import DictConfig, OmegaConf, open_dict

from pipeline.config import (
    Config, DataConf, ExecutorConf, HardwareConf, HpoConf, ModelSpecConf, PredictConfig, ResourcesConf, Resume,
    SearchDimConf, TrackingConf,
)
from pipeline.errors import ConfigError
from pipeline.memory.budget import MemoryRequest
from pipeline.objectives import check as check_objectives
from pipeline.redact import flatten, redact
from pipeline.resources import Request
from pipeline.stacking import check as check_stacking
from pipeline.targets import ALWAYS_ALLOWED, Kind, check_allowed_targets, check_no_targets, resolve

if TYPE_CHECKING:
    from pipeline.models.base import TabularModel


@dataclass(frozen=True)
class ModelSpec:
    name: str
    target: str
    params: dict
    resources: Request
    search_space: dict[str, SearchDimConf]
    cls: type[TabularModel]
    memory: MemoryRequest = field(default_factory=MemoryRequest)  # the model's own memory_gb / gpu_memory_gb

    def prototype(self) -> TabularModel:
        """A fresh model object; its params are values, never objects to build (see check_no_targets)."""
        import copy

        return self.cls(params=copy.deepcopy(self.params), name=self.name)


@dataclass(frozen=True)
class Settings:
    data: DataConf
    models: tuple[ModelSpec, ...]
    hardware: Optional[HardwareConf]
    num_folds: int
    bag: Request
    fit: Request
    sequential: bool
    hpo: HpoConf
    executor: ExecutorConf
    tracking: TrackingConf
    seed: int
    eval_metric: str
    dry_run: bool
    resume: Resume
    objectives: tuple[str, ...]  # what the run returns: see pipeline/objectives.py
    params: dict  # the resolved config, flattened and redacted, for MLflow
    config_yaml: str  # the resolved config, redacted
    refit: bool = False
    stack_levels: int = 0
    bag_memory: MemoryRequest = field(default_factory=MemoryRequest)
    fit_memory: MemoryRequest = field(default_factory=MemoryRequest)
    allowed_targets: tuple[str, ...] = ALWAYS_ALLOWED  # module prefixes a _target_ may name

    @property
    def library_modules(self) -> tuple[str, ...]:
        """The modules the run's models import to fit (each once, in model order)."""
        return tuple(dict.fromkeys(m for spec in self.models for m in spec.cls.library_modules))


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
    check_component("hpo", conf.hpo.target, allowed, "pipeline.searchers.Searcher", "a searcher class")
    conf.hpo.check({m.name: m.search_space for m in models})
    check_data(conf.data, allowed, conf.seed)
    par = conf.parallelism
    check_stacking(conf.stack_levels, par.num_folds)
    redacted = redact(tree)
    return Settings(
        data=conf.data,
        models=models,
        hardware=conf.hardware,
        num_folds=par.num_folds,
        bag=_request(par.bag, "parallelism.bag"),
        fit=_request(par.fit, "parallelism.fit"),
        sequential=par.sequential,
        hpo=conf.hpo,
        executor=conf.executor,
        tracking=conf.tracking,
        seed=conf.seed,
        eval_metric=conf.eval_metric,
        dry_run=conf.dry_run,
        resume=Resume.parse(conf.resume),
        objectives=check_objectives(conf.objectives),
        params=flatten(redacted),
        config_yaml=OmegaConf.to_yaml(OmegaConf.create(redacted)),
        refit=conf.refit,
        stack_levels=conf.stack_levels,
        bag_memory=_memory(par.bag, "parallelism.bag"),
        fit_memory=_memory(par.fit, "parallelism.fit"),
        allowed_targets=allowed,
    )


def check_data(data: DataConf, allowed: tuple[str, ...], seed: int) -> None:
    """The data source's class within allowed_targets (loading runs its own checks); null data.seed
    is the run's."""
    if data.seed is None:
        data.seed = seed
    check_component("data", data.target, allowed, "pipeline.data_sources.DataSource", "a data source class")


def check_component(key: str, target: str, allowed: tuple[str, ...], base: str, what: str = "") -> type:
    """The class `key._target_` names: inside allowed_targets, importable, a subclass of `base`."""
    return resolve(f"{key}._target_", target, allowed, Kind(base, what or "a class"))


@dataclass(frozen=True)
class PredictSettings:
    """Batch prediction: which trained model, what to score, where to write, on what hardware."""

    source: str
    predictor: str
    data: DataConf
    output: str
    chunk_rows: int
    id_column: Optional[str]
    tracking_uri: Optional[str]
    hardware: Optional[HardwareConf]


def read_predict_settings(cfg: DictConfig) -> PredictSettings:
    """The one place that reads the `predict` config tree."""
    conf: PredictConfig = typed(cfg, PredictConfig)
    if conf.chunk_rows < 1:
        raise ConfigError(f"chunk_rows={conf.chunk_rows} must be at least 1")
    if not conf.output.endswith((".csv", ".parquet", ".pq")):
        raise ConfigError(f"output={conf.output!r} must name a .csv or .parquet file")
    values(cfg)
    check_data(conf.data, ALWAYS_ALLOWED + check_allowed_targets(conf.allowed_targets), 0)
    return PredictSettings(
        source=conf.source, predictor=conf.predictor, data=conf.data, output=conf.output,
        chunk_rows=conf.chunk_rows, id_column=conf.id_column, tracking_uri=conf.tracking.uri,
        hardware=conf.hardware,
    )


def _request(level: ResourcesConf, prefix: str) -> Request:
    return Request.parse(level.num_cpus, level.num_gpus, prefix)


def _memory(level: ResourcesConf, prefix: str) -> MemoryRequest:
    return MemoryRequest.parse(level.memory_gb, level.gpu_memory_gb, prefix)


def _model_spec(name: str, spec: ModelSpecConf, allowed: tuple[str, ...]) -> ModelSpec:
    key = f"model.{name}"
    cls = check_component(key, spec._target_, allowed, "pipeline.models.base.TabularModel", "a model class")
    resources = _request(spec.resources, f"{key}.resources")
    return ModelSpec(name, spec._target_, dict(spec.params), resources, dict(spec.search_space), cls,
                     _memory(spec.resources, f"{key}.resources"))
