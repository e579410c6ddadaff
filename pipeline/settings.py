"""Typed settings of a run, read once from the composed config by the composition root.

Nothing below `pipeline.run` sees a DictConfig: it gets these frozen values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from pipeline.data import DataSpec
from pipeline.errors import ConfigError, closest
from pipeline.hpo import HpoSpec, SearchDim
from pipeline.objectives import check as check_objectives
from pipeline.models.base import TabularModel
from pipeline.redact import flatten, redact
from pipeline.resources import Request

ALWAYS_ALLOWED = ("pipeline.",)
BACKENDS = ("mlflow", "none")
IN_PROCESS = ("auto", "always", "never")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    target: str
    params: dict
    resources: Request
    search_space: dict[str, SearchDim]
    cls: type[TabularModel]

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


@dataclass(frozen=True)
class TrackingSpec:
    backend: str = "mlflow"
    uri: Optional[str] = None
    experiment: str = "pipeline"
    run_name: Optional[str] = None
    log_models: bool = True
    system_metrics: bool = False
    system_metrics_interval_s: float = 10.0
    timeout_s: float = 10.0
    tags: dict = field(default_factory=dict)


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


def read_settings(cfg: DictConfig) -> Settings:
    """The one place that reads the config tree."""
    tree = OmegaConf.to_container(cfg, resolve=True)
    tree.pop("hydra", None)
    seed = int(tree["seed"])
    data = dict(tree["data"])
    data_spec = DataSpec(
        **{k: v for k, v in data.items() if k not in ("drop_columns", "categorical_columns", "storage_options")},
        storage_options=dict(data["storage_options"]),
        drop_columns=tuple(data["drop_columns"]),
        categorical_columns=tuple(data["categorical_columns"]),
        seed=seed,
    )
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
    tr = tree["tracking"]
    if tr["backend"] not in BACKENDS:
        raise ConfigError(f"tracking.backend={tr['backend']!r} is not one of {', '.join(BACKENDS)}{closest(tr['backend'], BACKENDS)}")
    if tr["system_metrics_interval_s"] <= 0:
        raise ConfigError(f"tracking.system_metrics_interval_s={tr['system_metrics_interval_s']} must be > 0")
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
        executor=ExecutorSpec(ex["name"], int(ex["max_retries"]), ex["in_process"], ex["address"], dict(ex["ray_init"])),
        tracking=TrackingSpec(**tr),
        seed=seed,
        eval_metric=str(tree["eval_metric"]),
        dry_run=bool(tree["dry_run"]),
        resume=tree["resume"],
        objectives=check_objectives(tree["objectives"]),
        params={k: v for k, v in flatten(redacted).items()},
        config_yaml=OmegaConf.to_yaml(OmegaConf.create(redacted)),
    )


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
    return ModelSpec(name, target, dict(spec["params"]), resources, space, cls)
