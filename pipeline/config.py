"""Typed schemas of every config group, registered in Hydra's ConfigStore.

The primary config (`conf/config.yaml`) lists `config_schema` first in its defaults, so every
group merges into these dataclasses: a misspelt key or a wrong type fails at compose time
with Hydra's message naming the key.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from pipeline.errors import ConfigError, closest

log = logging.getLogger(__name__)

# The built-in classes the names of `data.source` and `hpo.searcher` stand for; `_target_` names any other.
DATA_SOURCES = {
    "bundled": "pipeline.data_sources.BundledSource",
    "csv": "pipeline.data_sources.FileSource",
    "parquet": "pipeline.data_sources.FileSource",
    "synthetic": "pipeline.data_sources.SyntheticSource",
}
SEARCHERS = {
    "none": "pipeline.searchers.NoSearch",
    "random": "pipeline.searchers.RandomSearch",
    "tpe": "pipeline.searchers.TpeSearch",
    "grid": "pipeline.searchers.GridSearch",
}
CUSTOM = "custom"  # data.source / hpo.searcher of a class named by _target_
BUNDLED = {"adult": "income", "california_housing": "MedHouseVal"}  # bundled data set -> its label
PROBLEM_TYPES = ("auto", "binary", "multiclass", "regression")
UNSEEN_POLICIES = ("missing", "error")
DIM_TYPES = ("float", "int", "categorical")
IN_PROCESS = ("auto", "always", "never")
BACKENDS = ("mlflow", "none")


def _one_of(key: str, value: Any, valid) -> None:
    if value not in valid:
        raise ConfigError(f"{key}={value!r} is not one of {', '.join(valid)}{closest(str(value), tuple(valid))}")


def _target(key: str, name: str, target: Optional[str], builtin: dict[str, str]) -> str:
    """The class a component's config names: its `_target_`, else the built-in class of its name."""
    if target:
        return target
    if name == CUSTOM:
        raise ConfigError(f"{key}={CUSTOM} needs the class: set {key.rsplit('.', 1)[0]}._target_=my_module.MyClass")
    _one_of(key, name, (*builtin, CUSTOM))
    return builtin[name]


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
class SearchDimConf:
    """One hyperparameter's search space (Optuna distributions)."""

    type: str = MISSING  # float | int | categorical
    low: Optional[float] = None
    high: Optional[float] = None
    log: bool = False
    step: Optional[float] = None
    choices: Optional[List[Any]] = None

    def check(self, key: str) -> None:
        if self.type not in DIM_TYPES:
            raise ConfigError(f"{key}.type={self.type!r} is not one of {', '.join(DIM_TYPES)}{closest(self.type, DIM_TYPES)}")
        if self.type == "categorical":
            if not self.choices:
                raise ConfigError(f"{key}: a categorical dimension needs a non-empty choices list")
            return
        if self.low is None or self.high is None:
            raise ConfigError(f"{key}: a {self.type} dimension needs low and high")
        if self.low >= self.high:
            raise ConfigError(f"{key}: low={self.low} must be below high={self.high}")
        if self.log and self.low <= 0:
            raise ConfigError(f"{key}: a log scale needs low > 0 (low={self.low})")
        if self.log and self.step is not None:
            raise ConfigError(f"{key}: log and step cannot be combined")

    def distribution(self):
        """The Optuna distribution of this dimension."""
        import optuna

        if self.type == "categorical":
            return optuna.distributions.CategoricalDistribution(list(self.choices))
        if self.type == "int":
            return optuna.distributions.IntDistribution(int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return optuna.distributions.FloatDistribution(float(self.low), float(self.high), log=self.log, step=self.step)

    def grid(self, points: int = 3) -> list:
        """Grid values: every choice; a stepped range in full; else `points` values, geometric on a log scale."""
        import numpy as np

        if self.type == "categorical":
            return list(self.choices)
        if self.step is not None:
            values = np.arange(self.low, self.high + self.step / 2, self.step)
        elif self.log:
            values = np.geomspace(self.low, self.high, points)
        else:
            values = np.linspace(self.low, self.high, points)
        if self.type == "int":
            return sorted({int(round(v)) for v in values})
        return [float(v) for v in values]


@dataclass
class ModelSpecConf:
    """One model: its class, the library's own parameters, its base-model resources."""

    _target_: str = MISSING
    params: Dict[str, Any] = field(default_factory=dict)
    resources: ResourcesConf = field(default_factory=ResourcesConf)
    search_space: Dict[str, SearchDimConf] = field(default_factory=dict)


@dataclass
class HpoConf:
    """In-run search: which searcher, how many trials; checked when the config becomes settings."""

    searcher: str = "none"  # none | random | tpe | grid | custom (hpo._target_ names the class)
    num_trials: int = 1
    seed: Optional[int] = None  # null: the run's seed
    start_from_defaults: bool = True  # trial 0 fits the model's own params
    pruning: bool = False  # stop bad trials early (network epochs, boosting rounds)
    grid_points: int = 3  # grid: values per continuous dimension (stepped ranges and choices in full)
    _target_: Optional[str] = None  # a pipeline.searchers.Searcher class; null: the one `searcher` names
    options: Dict[str, Any] = field(default_factory=dict)  # keyword arguments of that class

    def __post_init__(self) -> None:
        self.target = _target("hpo.searcher", self.searcher, self._target_, SEARCHERS)
        if self.num_trials < 1:
            raise ConfigError(f"hpo.num_trials={self.num_trials} must be >= 1")
        if self.grid_points < 2:
            raise ConfigError(f"hpo.grid_points={self.grid_points} must be >= 2")
        if self.searcher == "none" and self.num_trials > 1:
            log.warning(
                "hpo.searcher=none: the %d trials fit each model's own params with different seeds; "
                "choose hpo=random, hpo=tpe or hpo=grid to search", self.num_trials,
            )

    @property
    def searches(self) -> bool:
        """Whether trials draw parameters from the search spaces (else each fits the model's own)."""
        return self.make_searcher().searches

    def make_searcher(self):
        """The searcher object (hydra.utils.instantiate of the target), made once."""
        if getattr(self, "_searcher", None) is None:
            from hydra.utils import instantiate

            self._searcher = instantiate({"_target_": self.target, **self.options}, _convert_="all")
        return self._searcher

    def check(self, spaces: dict[str, dict[str, SearchDimConf]]) -> None:
        """The search spaces against the searcher: each dimension valid, none empty when searching."""
        for model, space in spaces.items():
            for name, dim in space.items():
                dim.check(f"model.{model}.search_space.{name}")
            if self.searches and not space:
                raise ConfigError(f"hpo.searcher={self.searcher} but model.{model}.search_space is empty")

    def trials_for(self, model: str, space: dict[str, SearchDimConf]) -> int:
        """How many trials a model runs: num_trials, or fewer when the searcher has fewer points."""
        return self.make_searcher().trials(self, model, space)

    def __getstate__(self) -> dict:  # the searcher is made again where it is needed
        return {k: v for k, v in self.__dict__.items() if k != "_searcher"}


@dataclass
class DataConf:
    """What to train on: a built-in source (`source`) or a user's class (`_target_`), and how to split it."""

    name: str = "adult"
    source: str = "bundled"  # bundled | csv | parquet | synthetic | custom (data._target_ names the class)
    path: Optional[str] = None  # csv/parquet file; bundled: adult | california_housing (null: name)
    label: Optional[str] = None  # bundled: null is the data set's own label
    problem_type: str = "auto"  # auto | binary | multiclass | regression
    drop_columns: List[str] = field(default_factory=list)
    categorical_columns: List[str] = field(default_factory=list)  # besides those typed as text or category
    test_path: Optional[str] = None  # a separate test file; else a seeded split of data.path
    storage_options: Dict[str, Any] = field(default_factory=dict)  # pandas/fsspec options (s3://, gs://): keys, tokens
    unseen_categories: str = "missing"  # test categories never seen in training: missing | error
    test_size: float = 0.2
    val_size: float = 0.2  # of what remains after the test split
    max_rows: Optional[int] = None  # a seeded subsample, for quick runs
    # synthetic generator
    rows: int = 10_000
    features: int = 20
    classes: int = 2  # 0: regression
    categorical_features: int = 0
    seed: Optional[int] = None  # the split's and subsample's seed; null: the run's seed
    _target_: Optional[str] = None  # a pipeline.data_sources.DataSource class; null: the one `source` names
    options: Dict[str, Any] = field(default_factory=dict)  # keyword arguments of that class

    def __post_init__(self) -> None:
        self.target = _target("data.source", self.source, self._target_, DATA_SOURCES)
        _one_of("data.problem_type", self.problem_type, PROBLEM_TYPES)
        _one_of("data.unseen_categories", self.unseen_categories, UNSEEN_POLICIES)
        for key in ("test_size", "val_size"):
            value = getattr(self, key)
            if not 0 < value < 1:
                raise ConfigError(f"data.{key}={value} must be a fraction between 0 and 1")
        if self.max_rows is not None and self.max_rows < 10:
            raise ConfigError(f"data.max_rows={self.max_rows} must be at least 10")
        if self.source == "bundled" and self._target_ is None:
            self.path = self.path or self.name
            if self.path not in BUNDLED:
                raise ConfigError(f"data.path={self.path!r} is not a bundled data set; bundled: "
                                  f"{', '.join(BUNDLED)}{closest(str(self.path), tuple(BUNDLED))}")
            self.label = self.label or BUNDLED[self.path]

    def make_source(self):
        """The data source object (hydra.utils.instantiate of the target, given this config)."""
        from hydra.utils import instantiate

        factory = instantiate({"_target_": self.target, "_partial_": True, **self.options}, _convert_="all")
        return factory(self)


@dataclass
class ExecutorConf:
    name: str = "local"  # local | ray
    max_retries: int = 1
    in_process: str = "auto"  # local: auto | always | never
    task_timeout_s: Optional[float] = None  # a fit running longer fails like a crash (retried); null: no limit
    address: Optional[str] = None  # ray: null starts a local instance; "auto" or ray://host:port joins one
    ray_init: Dict[str, Any] = field(default_factory=dict)  # extra ray.init keyword arguments

    def __post_init__(self) -> None:
        if self.in_process not in IN_PROCESS:
            raise ConfigError(f"executor.in_process={self.in_process!r} is not one of {', '.join(IN_PROCESS)}")
        if self.max_retries < 0:
            raise ConfigError(f"executor.max_retries={self.max_retries} must be >= 0")
        timeout = self.task_timeout_s
        if timeout is not None and not timeout > 0:
            raise ConfigError(f"executor.task_timeout_s={timeout} must be > 0 seconds (or null: no limit)")
        if timeout is not None and self.name == "local" and self.in_process == "always":
            raise ConfigError(
                f"executor.task_timeout_s={timeout} needs fits in worker processes, which can be stopped, but "
                "executor.in_process=always fits in the driver; use in_process=auto or never"
            )


@dataclass
class TrackingConf:
    backend: str = "mlflow"  # mlflow | none
    uri: Optional[str] = None  # null: sqlite:///outputs/mlflow.db under the launch directory
    experiment: str = "pipeline"
    run_name: Optional[str] = None  # null: the job's overrides
    log_models: bool = True
    system_metrics: bool = False  # CPU, memory and GPU use (MLflow's system metrics: psutil, nvidia-ml-py)
    system_metrics_interval_s: float = 10.0
    timeout_s: float = 10.0  # how long an MLflow server may take to answer
    tags: Dict[str, str] = field(default_factory=dict)
    register_model: Optional[str] = None  # a name: the run's best model is registered under it
    register_alias: str = "champion"  # the alias that points at the newly registered version

    def __post_init__(self) -> None:
        _one_of("tracking.backend", self.backend, BACKENDS)
        if self.system_metrics_interval_s <= 0:
            raise ConfigError(f"tracking.system_metrics_interval_s={self.system_metrics_interval_s} must be > 0")
        if self.register_model is not None and self.backend == "none":
            raise ConfigError(f"tracking.register_model={self.register_model!r} needs MLflow tracking: "
                              "drop tracking=none, or drop tracking.register_model")
        if self.register_model is not None and not self.log_models:
            raise ConfigError(f"tracking.register_model={self.register_model!r} registers a logged model, but "
                              "tracking.log_models=false logs none; set tracking.log_models=true")
        if self.timeout_s <= 0:
            raise ConfigError(f"tracking.timeout_s={self.timeout_s} must be > 0")


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
    refit: bool = False  # fit each model's best trial once more on train + validation (one model, no bag)
    resume: Any = False  # false | true (newest unfinished run) | a run directory
    allowed_targets: List[str] = field(default_factory=list)  # module prefixes _target_ may name
    # what the run returns to a sweeper: val_score, fit_seconds, predict_seconds (pipeline/objectives.py)
    objectives: List[str] = field(default_factory=lambda: ["val_score"])


@dataclass(frozen=True)
class Resume:
    """`resume`: reuse no earlier run (false), the newest unfinished one (true), or a run directory."""

    newest: bool = False
    directory: Optional[str] = None

    @classmethod
    def parse(cls, value: Any) -> "Resume":
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):  # a quoted override
            value = value.strip().lower() == "true"
        if value is None or value is False:
            return cls()
        if value is True:
            return cls(newest=True)
        if isinstance(value, str) and value.strip():
            return cls(directory=value)
        raise ConfigError(f"resume={value!r}: give false, true (the newest unfinished run) or a run directory")

    def __bool__(self) -> bool:
        return self.newest or self.directory is not None


def whole_gpus(value: Any) -> Optional[int]:
    """`${whole_gpus:...}`: a GPU count as the whole number SLURM asks for (2.0 -> 2); a share is an error."""
    if value is None:
        return None
    count = float(value)
    if count < 0 or count != int(count):
        from pipeline.errors import ConfigError

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
