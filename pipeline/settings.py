"""Typed settings of a run, read once from the composed config by the composition root.

Nothing below `pipeline.run` sees a DictConfig: it gets these frozen values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from pipeline.data import DataSpec
from pipeline.errors import ConfigError
from pipeline.hpo import HpoSpec, SearchDim
from pipeline.memory.budget import MemoryRequest
from pipeline.objectives import check as check_objectives
from pipeline.models.base import TabularModel
from pipeline.redact import flatten, redact
from pipeline.resources import Request
from pipeline.targets import ALWAYS_ALLOWED

IN_PROCESS = ("auto", "always", "never")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    target: str
    params: dict
    resources: Request
    search_space: dict[str, SearchDim]
    cls: type[TabularModel]
    memory: MemoryRequest = field(default_factory=MemoryRequest)  # the model's own memory_gb / gpu_memory_gb

    def prototype(self) -> TabularModel:
        from hydra.utils import instantiate

        return instantiate({"_target_": self.target, "params": self.params, "name": self.name}, _convert_="all")


@dataclass(frozen=True)
class ExecutorSpec:
    name: str = "local"
    max_retries: int = 1
    in_process: str = "auto"
    address: Optional[str] = None
    ray_init: dict = field(default_factory=dict)
    task_timeout_s: Optional[float] = None
    _target_: Optional[str] = None


@dataclass(frozen=True)
class TrackingSpec:
    backend: str = "mlflow"
    _target_: Optional[str] = None
    uri: Optional[str] = None
    experiment: str = "pipeline"
    run_name: Optional[str] = None
    log_models: bool = True
    system_metrics: bool = False
    system_metrics_interval_s: float = 10.0
    timeout_s: float = 10.0
    tags: dict = field(default_factory=dict)
    register_model: Optional[str] = None
    register_alias: str = "champion"


@dataclass(frozen=True)
class Settings:
    data: DataSpec
    models: tuple[ModelSpec, ...]
    hardware: Optional[dict]
    num_folds: int
    bag: Request
    fit: Request
    sequential: bool
    hpo: HpoSpec
    executor: ExecutorSpec
    tracking: TrackingSpec
    seed: int
    eval_metric: str
    dry_run: bool
    resume: Any
    objectives: tuple[str, ...]  # what the run returns: see pipeline/objectives.py
    params: dict  # the resolved config, flattened and redacted, for MLflow
    config_yaml: str  # the resolved config, redacted
    refit: bool = False
    bag_memory: MemoryRequest = field(default_factory=MemoryRequest)
    fit_memory: MemoryRequest = field(default_factory=MemoryRequest)
    allowed_targets: tuple[str, ...] = ALWAYS_ALLOWED  # module prefixes a _target_ may name


def read_settings(cfg: DictConfig) -> Settings:
    """The one place that reads the config tree."""
    tree = OmegaConf.to_container(cfg, resolve=True)
    tree.pop("hydra", None)
    seed = int(tree["seed"])
    data_spec = _data_spec(tree["data"], seed)
    allowed = ALWAYS_ALLOWED + tuple(tree.get("allowed_targets") or ())
    if not tree["model"]:
        raise ConfigError("model: no model is configured; pick one with model=lightgbm (or xgboost, nn, all)")
    models = tuple(_model_spec(name, spec, allowed) for name, spec in tree["model"].items())
    par = tree["parallelism"]
    hpo = tree["hpo"]
    hpo_spec = HpoSpec(
        searcher=hpo["searcher"], num_trials=int(hpo["num_trials"]),
        seed=seed if hpo["seed"] is None else int(hpo["seed"]),
        start_from_defaults=bool(hpo["start_from_defaults"]), pruning=bool(hpo["pruning"]),
        grid_points=int(hpo["grid_points"]),
    )
    hpo_spec.check({m.name: m.search_space for m in models})
    ex = tree["executor"]
    if ex["in_process"] not in IN_PROCESS:
        raise ConfigError(f"executor.in_process={ex['in_process']!r} is not one of {', '.join(IN_PROCESS)}")
    if ex["max_retries"] < 0:
        raise ConfigError(f"executor.max_retries={ex['max_retries']} must be >= 0")
    timeout = ex.get("task_timeout_s")
    if timeout is not None and not timeout > 0:
        raise ConfigError(f"executor.task_timeout_s={timeout} must be > 0 seconds (or null: no limit)")
    if timeout is not None and ex["name"] == "local" and ex["in_process"] == "always":
        raise ConfigError(
            f"executor.task_timeout_s={timeout} needs fits in worker processes, which can be stopped, but "
            "executor.in_process=always fits in the driver; use in_process=auto or never"
        )
    tr = tree["tracking"]
    if tr["system_metrics_interval_s"] <= 0:
        raise ConfigError(f"tracking.system_metrics_interval_s={tr['system_metrics_interval_s']} must be > 0")
    if tr["register_model"] is not None and tr["backend"] == "none":
        raise ConfigError(f"tracking.register_model={tr['register_model']!r} needs MLflow tracking: "
                          "drop tracking=none, or drop tracking.register_model")
    if tr["register_model"] is not None and not tr["log_models"]:
        raise ConfigError(f"tracking.register_model={tr['register_model']!r} registers a logged model, but "
                          "tracking.log_models=false logs none; set tracking.log_models=true")
    if tr["timeout_s"] <= 0:
        raise ConfigError(f"tracking.timeout_s={tr['timeout_s']} must be > 0")
    redacted = redact(tree)
    return Settings(
        data=data_spec,
        models=models,
        hardware=tree.get("hardware"),
        num_folds=int(par["num_folds"]),
        bag=Request.parse(par["bag"]["num_cpus"], par["bag"]["num_gpus"], "parallelism.bag"),
        fit=Request.parse(par["fit"]["num_cpus"], par["fit"]["num_gpus"], "parallelism.fit"),
        sequential=bool(par["sequential"]),
        hpo=hpo_spec,
        executor=ExecutorSpec(ex["name"], int(ex["max_retries"]), ex["in_process"], ex["address"], dict(ex["ray_init"]),
                              None if timeout is None else float(timeout), ex["_target_"]),
        tracking=TrackingSpec(**tr),
        seed=seed,
        eval_metric=str(tree["eval_metric"]),
        dry_run=bool(tree["dry_run"]),
        resume=tree["resume"],
        objectives=check_objectives(tree["objectives"]),
        params={k: v for k, v in flatten(redacted).items()},
        config_yaml=OmegaConf.to_yaml(OmegaConf.create(redacted)),
        refit=bool(tree["refit"]),
        bag_memory=_memory(par["bag"], "parallelism.bag"),
        fit_memory=_memory(par["fit"], "parallelism.fit"),
        allowed_targets=allowed,
    )


def _data_spec(data: dict, seed: int) -> DataSpec:
    return DataSpec(
        **{k: v for k, v in data.items() if k not in ("drop_columns", "categorical_columns", "storage_options")},
        storage_options=dict(data["storage_options"]),
        drop_columns=tuple(data["drop_columns"]),
        categorical_columns=tuple(data["categorical_columns"]),
        seed=seed,
    )


@dataclass(frozen=True)
class PredictSettings:
    """Batch prediction: which trained model, what to score, where to write, on what hardware."""

    source: str
    predictor: str
    data: DataSpec
    output: str
    chunk_rows: int
    id_column: Optional[str]
    tracking_uri: Optional[str]
    hardware: Optional[dict]


def read_predict_settings(cfg: DictConfig) -> PredictSettings:
    """The one place that reads the `predict` config tree."""
    tree = OmegaConf.to_container(cfg, resolve=True)
    if int(tree["chunk_rows"]) < 1:
        raise ConfigError(f"chunk_rows={tree['chunk_rows']} must be at least 1")
    output = str(tree["output"])
    if not output.endswith((".csv", ".parquet", ".pq")):
        raise ConfigError(f"output={output!r} must name a .csv or .parquet file")
    return PredictSettings(
        source=str(tree["source"]), predictor=str(tree["predictor"]), data=_data_spec(tree["data"], 0),
        output=output, chunk_rows=int(tree["chunk_rows"]), id_column=tree["id_column"],
        tracking_uri=tree["tracking"]["uri"], hardware=tree.get("hardware"),
    )


def _memory(level: dict, prefix: str) -> MemoryRequest:
    return MemoryRequest.parse(level.get("memory_gb"), level.get("gpu_memory_gb"), prefix)


def _model_spec(name: str, spec: dict, allowed: tuple[str, ...]) -> ModelSpec:
    target = spec["_target_"]
    if not any(target.startswith(prefix) for prefix in allowed):
        raise ConfigError(
            f"model.{name}._target_={target!r} is outside the allowed modules ({', '.join(allowed)}); "
            "add its module prefix to allowed_targets if you trust it"
        )
    import importlib

    module_name, _, attr = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"model.{name}._target_={target!r} cannot be imported: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, TabularModel)):
        raise ConfigError(f"model.{name}._target_={target!r} is not a model class (a pipeline.models.TabularModel)")
    space = {k: SearchDim(**{**v, "choices": tuple(v["choices"]) if v.get("choices") else None})
             for k, v in spec["search_space"].items()}
    resources = Request.parse(spec["resources"]["num_cpus"], spec["resources"]["num_gpus"], f"model.{name}.resources")
    memory = _memory(spec["resources"], f"model.{name}.resources")
    return ModelSpec(name, target, dict(spec["params"]), resources, space, cls, memory)
