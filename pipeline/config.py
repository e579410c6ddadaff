"""Typed schemas of every config group, registered in Hydra's ConfigStore.

The primary config (`conf/config.yaml`) lists `config_schema` first in its defaults, so every
group merges into these dataclasses: a misspelt key or a wrong type fails at compose time
with Hydra's message naming the key. OmegaConf.to_object then builds them as the run's typed
settings (`pipeline.settings`); `pipeline.config_checks` checks their values, once. A model's
search space is a map the user adds dimensions to (`+model.<name>.search_space.<param>={...}`),
typed as it is built (`typed_dims`), its errors ConfigErrors naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pipeline.components import (  # noqa: F401  (the schema of every group is importable from here)
    BUNDLED, BUNDLED_SOURCE, NO_SEARCH, DataConf, HpoConf, SearchDimConf,
)
from pipeline.errors import ConfigError

_HERE = Path(__file__).resolve().parent
# the config groups: in the package where installed (pyproject maps conf there), else the checkout's
CONFIG_DIR = str(_HERE / "conf" if (_HERE / "conf").is_dir() else _HERE.parent / "conf")
IN_PROCESS = ("auto", "always", "never")
# The engine's own executor and trackers, as conf/executor/local.yaml and conf/tracking/*.yaml name them.
LOCAL_EXECUTOR = "pipeline.executors.local_backend"
MLFLOW_TRACKER = "pipeline.tracking.factory.mlflow_tracker"
NO_TRACKER = "pipeline.tracking.factory.no_tracker"


def typed_dims(key: str, space: dict) -> dict:
    """A model's search space `key` (name -> a SearchDimConf or a plain dict, as OmegaConf.to_object builds a
    Dict[str, Any]) as SearchDimConfs, each dict merged into the schema as composition would: a misspelt key,
    a wrong type or a value that is no mapping is a ConfigError naming `key.<name>`."""
    typed = {}
    keys = ", ".join(f.name for f in fields(SearchDimConf))
    for name, dim in space.items():
        if isinstance(dim, SearchDimConf):
            typed[name] = dim
            continue
        if not isinstance(dim, dict):
            raise ConfigError(f"{key}.{name}={dim!r} is not a mapping of a dimension's keys ({keys})")
        try:
            typed[name] = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SearchDimConf), dim))
        except OmegaConfBaseException as error:
            where = f"{key}.{name}" + (f".{error.full_key}" if getattr(error, "full_key", None) else "")
            reason = str(error.msg).splitlines()[0]
            raise ConfigError(f"{where}: {reason} (a dimension's keys: {keys})") from None
    return typed


@dataclass
class ResourcesConf:
    """A resource request at one level; null means 'derive from the level above'."""

    num_cpus: Optional[int] = None
    num_gpus: Optional[float] = None
    memory_gb: Optional[float] = None  # RAM a fit (or a bag's folds together) may use; null: the estimate
    gpu_memory_gb: Optional[float] = None  # memory on each GPU of a fit; null: the estimate


@dataclass
class HardwareConf:
    """The total of the run (the predictor level). Absent from the defaults: detected."""

    name: str = "custom"
    num_cpus: Optional[int] = None  # null: this machine's CPU count
    num_gpus: float = 0  # fractions below 1 give a job a share of one device
    devices: Any = None  # Lightning grammar: N, -1, [1, 3], "1, 3", "2,"; null: the first num_gpus
    memory_gb: Optional[float] = None  # RAM of the box; null: what this machine has available
    gpu_memory_gb: Optional[float] = None  # memory of each GPU; null: detected through NVML


@dataclass
class ParallelismConf:
    num_folds: int = 1  # k-fold bagging; 0 or 1 is a single holdout fit
    bag: ResourcesConf = field(default_factory=ResourcesConf)  # one bagged model (all its folds)
    fit: ResourcesConf = field(default_factory=ResourcesConf)  # one base-model fit (one fold)
    sequential: bool = False  # one fit at a time, however many would fit


@dataclass
class ModelSpecConf:
    """One model: its class, the library's own parameters, its device, its base-model resources."""

    _target_: str = MISSING
    params: Dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"  # auto | cpu | cuda; auto: the planner's estimate picks (pipeline.planning.device_choice)
    gpu_params: Dict[str, Any] = field(default_factory=dict)  # laid over params when the model runs on a GPU
    resources: ResourcesConf = field(default_factory=ResourcesConf)
    # each a SearchDimConf once read (`typed_dims`): composed as a plain map, since OmegaConf refuses a new
    # key's dict in a Dict of dataclasses, so that
    # `+model.xgboost.search_space.max_leaves={type:int,low:4,high:256}` adds one
    search_space: Dict[str, Any] = field(default_factory=dict)


@dataclass
class ExecutorConf:
    _target_: str = LOCAL_EXECUTOR  # executor=ray: pipeline.executors.ray_backend; or your own (see allowed_targets)
    max_retries: int = 1
    in_process: str = "auto"  # local: auto | always | never
    task_timeout_s: Optional[float] = None  # a fit running longer fails like a crash (retried); null: no limit
    address: Optional[str] = None  # ray: null starts a local instance; "auto" or ray://host:port joins one
    ray_init: Dict[str, Any] = field(default_factory=dict)  # extra ray.init keyword arguments



@dataclass
class TrackingConf:
    _target_: str = MLFLOW_TRACKER  # tracking=none: pipeline.tracking.factory.no_tracker; or your own tracker
    uri: Optional[str] = None  # null: sqlite:///outputs/mlflow.db under the launch directory
    experiment: str = "pipeline"
    run_name: Optional[str] = None  # null: the job's overrides
    log_models: bool = True
    system_metrics: bool = False  # CPU, memory and GPU use (MLflow's system metrics: psutil, nvidia-ml-py)
    system_metrics_interval_s: float = 10.0
    timeout_s: float = 10.0  # how long an MLflow server may take to answer
    keep_alive_s: float = 600.0  # a tracker service kept this long after its last run (0: one process per run)
    tags: Dict[str, str] = field(default_factory=dict)
    register_model: Optional[str] = None  # a name: the run's best model is registered under it
    register_alias: str = "champion"  # the alias that points at the newly registered version
    ui_port: int = 5000  # the port of `mlflow ui` in the links the console prints for a local store



@dataclass
class Config:
    data: DataConf = MISSING
    model: Dict[str, ModelSpecConf] = MISSING
    parallelism: ParallelismConf = MISSING
    hpo: HpoConf = MISSING
    executor: ExecutorConf = MISSING
    tracking: TrackingConf = MISSING
    hardware: Optional[HardwareConf] = None
    seed: int = 0
    eval_metric: str = "auto"
    dry_run: bool = False
    # fit each model's best trial once more on train + validation (one model, no bag); null: the engine
    # decides (hpo=auto's bagged runs on a number to predict refit: pipeline.planning.budget.refits_answer)
    refit: Optional[bool] = None
    stack_levels: int = 0  # levels of models stacked on the base models' out-of-fold predictions (pipeline.graph.stacking)
    resume: Optional[str] = None  # null or false | true (the newest unfinished run) | a run directory
    allowed_targets: List[str] = field(default_factory=list)  # module prefixes _target_ may name
    # what the run returns to a sweeper: val_score, fit_seconds, predict_seconds (pipeline/objectives.py)
    objectives: List[str] = field(default_factory=lambda: ["val_score"])
    time_limit_s: Optional[float] = None  # seconds the whole run may take, start-up to last line; null: no limit
    fit_time_limit_s: Optional[float] = None  # seconds the fits alone may take, from the first one's start


@dataclass(frozen=True)
class Resume:
    """`resume`: reuse no earlier run (false), the newest unfinished one (true), or a run directory."""

    newest: bool = False
    directory: Optional[str] = None

    @classmethod
    def parse(cls, value: Optional[str]) -> "Resume":
        """`resume` as typed by its schema (a string: YAML's true and false arrive as "True" and "False")."""
        text = (value or "").strip()
        if text.lower() in ("", "false"):
            return cls()
        if text.lower() == "true":
            return cls(newest=True)
        return cls(directory=text)

    def __bool__(self) -> bool:
        return self.newest or self.directory is not None


def whole_gpus(value: Any) -> Optional[int]:
    """`${whole_gpus:...}`: a GPU count as the whole number SLURM asks for (2.0 -> 2); a share is an error."""
    if value is None:
        return None
    count = float(value)
    if count < 0 or count != int(count):
        raise ConfigError(
            f"hardware.num_gpus={value}: hydra/launcher=slurm asks SLURM for whole GPUs; give a whole number "
            "(to run several jobs on one GPU, use hydra/launcher=gpu with hydra.launcher.gpus_per_job=0.5)"
        )
    return int(count)


@dataclass
class PredictConfig:
    """`python -m pipeline.predict`: score a data source with a trained model."""

    source: str = MISSING  # the trained model: a run directory, an MLflow run id, or a models:/ or runs:/ URI
    predictor: str = "best"  # in a run: best, or a model's name (lightgbm, ensemble, lightgbm_refit ...)
    data: DataConf = MISSING  # what to score: any data source; its label column, if present, is ignored
    output: str = "predictions.csv"  # .csv or .parquet, relative to the launch directory
    chunk_rows: int = 100_000  # rows read, typed, predicted and written at a time
    id_column: Optional[str] = None  # an input column copied to the output; null: the row number (row_id)
    tracking: TrackingConf = MISSING  # where run ids and models:/ URIs are looked up
    hardware: Optional[HardwareConf] = None  # +hardware=1gpu: predict on a GPU
    allowed_targets: List[str] = field(default_factory=list)  # module prefixes data._target_ may name


def register_configs() -> None:
    ConfigStore.instance().store(name="config_schema", node=Config)
    ConfigStore.instance().store(name="predict_schema", node=PredictConfig)
    OmegaConf.register_new_resolver("whole_gpus", whole_gpus, replace=True)


def _share_config_store(self, memo):
    """The ConfigStore is a process-wide singleton: a deep copy of it is the same store.

    Hydra deep-copies its config repository, and with it the whole store, each time it lists a
    group's options: `--help` lists every group and spent seconds copying. Reads stay safe, since
    the store hands out a copy of each node it loads.
    """
    return self


ConfigStore.__deepcopy__ = _share_config_store


register_configs()
