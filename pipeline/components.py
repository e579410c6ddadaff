"""Config dataclasses of the groups whose class a user may swap by `_target_`: the data source
(`data`) and the searcher (`hpo`, with its search-space dimensions). `pipeline.config` re-exports them;
`pipeline.config_checks` checks their values.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from pipeline.errors import ConfigError, closest
from pipeline.targets import imported

log = logging.getLogger(__name__)

# The defaults' classes, as conf/data/adult.yaml and conf/hpo/none.yaml name them.
BUNDLED_SOURCE = "pipeline.data_sources.BundledSource"
NO_SEARCH = "pipeline.searchers.NoSearch"
BUNDLED = {"adult": "income", "california_housing": "MedHouseVal"}  # bundled data set -> its label
PROBLEM_TYPES = ("auto", "binary", "multiclass", "regression")
UNSEEN_POLICIES = ("missing", "error")
DIM_TYPES = ("float", "int", "categorical")


def one_of(key: str, value: Any, valid) -> None:
    """A ConfigError naming the key, the value, the valid ones and the closest, unless value is valid."""
    if value not in valid:
        raise ConfigError(f"{key}={value!r} is not one of {', '.join(valid)}{closest(str(value), tuple(valid))}")


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
        one_of(f"{key}.type", self.type, DIM_TYPES)
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

    def contains(self, value) -> bool:
        """Whether `value` is one this dimension can take."""
        if self.type == "categorical":
            return value in (self.choices or [])
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        if self.type == "int" and value != int(value):
            return False
        return self.low <= value <= self.high

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
class HpoConf:
    """In-run search: which searcher, how many trials; checked when the config becomes settings
    (pipeline.config_checks)."""

    num_trials: int = 1
    seed: Optional[int] = None  # null: the run's seed
    start_from_defaults: bool = True  # trial 0 fits the model's own params
    pruning: bool = False  # stop bad trials early (network epochs, boosting rounds)
    grid_points: int = 3  # grid: values per continuous dimension (stepped ranges and choices in full)
    # a pipeline.searchers.Searcher class: hpo=random, tpe, grid name the engine's; or your own
    _target_: str = NO_SEARCH
    options: Dict[str, Any] = field(default_factory=dict)  # keyword arguments of that class

    @property
    def searches(self) -> bool:
        """Whether trials draw parameters from the search spaces (else each fits the model's own)."""
        return self.make_searcher().searches

    def make_searcher(self):
        """A searcher object (the target's class, given `options` as keywords; searchers hold no state
        between calls, and this config holds none of them)."""
        # the target was checked by settings.read_settings; options are values, never built into objects
        return imported(self._target_)(**copy.deepcopy(self.options))

    def check(self, spaces: dict[str, dict[str, SearchDimConf]], budget_searches: bool = False) -> None:
        """The search spaces against the searcher (its class already checked): each dimension valid,
        none empty when searching; `budget_searches`: a time limit's hpo=auto takes this searcher's place."""
        for model, space in spaces.items():
            for name, dim in space.items():
                dim.check(f"model.{model}.search_space.{name}")
            if self.searches and not space:
                raise ConfigError(f"hpo._target_={self._target_} searches, but model.{model}.search_space is "
                                  "empty; give it a search space, or choose hpo=none")
        if not self.searches and self.num_trials > 1 and not budget_searches:
            log.warning(
                "hpo._target_=%s does not search: the %d trials fit each model's own params with different "
                "seeds; choose hpo=random, hpo=tpe or hpo=grid to search", self._target_, self.num_trials,
            )

    def trials_for(self, model: str, space: dict[str, SearchDimConf]) -> int:
        """How many trials a model runs: num_trials, or fewer when the searcher has fewer points."""
        return self.make_searcher().trials(self, model, space)


@dataclass
class DataConf:
    """What to train on: the source class (`_target_`, the engine's or a user's), and how to split it."""

    name: str = "adult"  # the data set's name, for the run's records
    path: Optional[str] = None  # csv/parquet file; bundled: adult | california_housing (null: name)
    label: Optional[str] = None  # bundled: null is the data set's own label
    problem_type: str = "auto"  # auto | binary | multiclass | regression
    drop_columns: List[str] = field(default_factory=list)
    categorical_columns: List[str] = field(default_factory=list)  # besides those typed as text or category
    column_roles: Dict[str, str] = field(default_factory=dict)  # column -> role (pipeline.roles.ROLES)
    infer_roles: bool = True  # false: every column a feature as its dtype says (no id/date/text roles)
    leak_check: str = "warn"  # a column that alone predicts the label: warn | error | off
    split: str = "random"  # random (stratified) | time: the earliest rows of data.time_column train
    time_column: Optional[str] = None  # data.split=time: the column that orders the rows
    test_path: Optional[str] = None  # a separate test file; else a seeded split of data.path
    storage_options: Dict[str, Any] = field(default_factory=dict)  # pandas/fsspec options (s3://, gs://): keys, tokens
    unseen_categories: str = "missing"  # test categories never seen in training: missing | error
    # classification: none | balanced (each training row weighs n_rows / (n_classes × rows of its class))
    class_weight: str = "none"
    test_size: float = 0.2
    val_size: float = 0.2  # of what remains after the test split
    max_rows: Optional[int] = None  # a seeded subsample (of Parquet, few row groups; of CSV, chunk by chunk)
    # synthetic generator
    rows: int = 10_000
    features: int = 20
    classes: int = 2  # 0: regression
    categorical_features: int = 0
    seed: Optional[int] = None  # the split's and subsample's seed; null: the run's seed
    # a pipeline.data_sources.DataSource class: data=csv, parquet, synthetic name the engine's; or your own
    _target_: str = BUNDLED_SOURCE
    options: Dict[str, Any] = field(default_factory=dict)  # keyword arguments of that class

    def __post_init__(self) -> None:
        """What the config leaves null, derived as the value is built: a file's source from its extension,
        a bundled data set's path and label (pipeline.config_checks checks the values)."""
        if self._target_ == BUNDLED_SOURCE and self.path and self.path not in BUNDLED:
            self._source_from_extension()
        if self._target_ == BUNDLED_SOURCE:
            self.path = self.path or self.name
            if self.path in BUNDLED:
                self.label = self.label or BUNDLED[self.path]

    def _source_from_extension(self) -> None:
        """`data.path=x.csv` or `x.parquet` without `data=`: the file's source, said in the log."""
        lower = str(self.path).lower()
        kinds = {".csv": "csv", ".csv.gz": "csv", ".tsv": "csv", ".parquet": "parquet", ".pq": "parquet"}
        kind = next((k for ext, k in kinds.items() if lower.endswith(ext)), None)
        if kind is None:
            return
        log = logging.getLogger("pipeline")
        log.info("data.path=%s: read as data=%s (from its extension)", self.path, kind)
        self._target_ = f"pipeline.data_sources.{kind.capitalize()}Source"
        self.name = kind
        if self.label == BUNDLED.get("adult") and self.path:  # the default data set's label is not the file's
            self.label = None

    def make_source(self):
        """A new data source object (the target's class, given this config and `options` as keywords);
        this config holds none. A run makes one as its settings are read (`Settings.source`), and its
        checks, planning, loading and tracking all use that one."""
        # the target was checked by settings; options are values, never built into objects
        return imported(self._target_)(self, **copy.deepcopy(self.options))
