"""Data sources: where the table of a `data` config comes from.

`data._target_` names the DataSource class: the engine's (conf/data/*.yaml: BundledSource,
CsvSource, ParquetSource, SyntheticSource) or any other in a module allowed_targets lets in, built with
the `data` config and `data.options` as its keywords. pandas is imported only when a table is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

from pipeline.errors import ConfigError, DataError, closest
from pipeline.table_files import check_file, header, label_column, read_file

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.config import DataConf


class DataSource:
    """Reads one table, label column included; subclasses override `read` (and `check`, `label`)."""

    kind: Optional[str] = None  # the engine's sources: bundled | csv | parquet | synthetic (how its shape is had)

    def __init__(self, spec: DataConf, **options):
        self.spec = spec
        self.options = options

    @property
    def label(self) -> Optional[str]:
        """The column to predict."""
        return self.spec.label

    def check(self) -> None:
        """Config checks that need no data: raise ConfigError before any work starts."""
        if not self.label:
            raise ConfigError("data.label is required: name the column to predict, as in data.label=target")

    def read(self, base_dir: Path) -> pd.DataFrame:
        """The whole table; relative paths are relative to base_dir (the launch directory)."""
        raise NotImplementedError

    def local_path(self, base_dir: Path) -> Optional[Path]:
        """The local file the table is read from, if there is one."""
        return None

    def location(self, base_dir: Path) -> str:
        """Where the rows come from, for the tracker (a path, a URL or 'generator:…')."""
        return f"source:{type(self).__module__}.{type(self).__qualname__}"

    def columns(self, base_dir: Path) -> Optional[list[str]]:
        """The table's column names if they can be had without reading its rows (a file's header or
        schema), else None: they are checked when the table is read."""
        return None

    def label_values(self, base_dir: Path) -> Optional[pd.Series]:
        """The label column alone, if it can be read without the rest of the table (a local file),
        else None: the problem type is then learnt when the table is read."""
        return None

    def problem_type(self, base_dir: Path) -> Optional[str]:
        """The problem type before the table is read: the declared one, or what the label column alone
        holds (as loading infers it: rows without a label dropped, data.max_rows sampled); None when
        that needs the whole table."""
        from pipeline.problem import problem_type_of

        spec = self.spec
        if spec.problem_type != "auto":
            return spec.problem_type
        y = self.label_values(base_dir)
        if y is None:
            return None
        y = y.dropna().reset_index(drop=True)
        if spec.max_rows is not None and len(y) > spec.max_rows:
            y = y.sample(n=spec.max_rows, random_state=spec.seed if spec.seed is not None else 0)
        if spec.test_path:
            test = resolve(spec.test_path, base_dir)
            if not isinstance(test, Path):
                return None
            import pandas as pd

            y = pd.concat([y, label_column(test, None, self.label, "data.test_path").dropna()], ignore_index=True)
        return problem_type_of(y, "auto", self.label) if y.nunique() >= 2 else None


class BundledSource(DataSource):
    """A data set shipped with the engine (data.path: adult | california_housing)."""

    kind = "bundled"

    def check(self) -> None:  # the config checked the name and filled in the label
        pass

    def _file(self):
        from importlib import resources

        return resources.files("pipeline.datasets") / f"{self.spec.path}.parquet"

    def read(self, base_dir: Path) -> pd.DataFrame:
        from importlib import resources

        from pipeline.parquet import read_parquet

        with resources.as_file(self._file()) as p:
            return read_parquet(Path(p))

    def location(self, base_dir: Path) -> str:
        return str(self._file())

    def columns(self, base_dir: Path) -> Optional[list[str]]:
        from importlib import resources

        with resources.as_file(self._file()) as p:
            return header(p, "parquet", "data.path")

    def label_values(self, base_dir: Path) -> Optional[pd.Series]:
        from importlib import resources

        with resources.as_file(self._file()) as p:
            return label_column(p, "parquet", self.label, "data.path")


class FileSource(DataSource):
    """A CSV or Parquet file, told apart by its suffix; local or remote (s3://, gs://, https:// through
    fsspec). CsvSource and ParquetSource read their format whatever the suffix."""

    def check(self) -> None:
        if not self.spec.path:
            suffix = self.kind or "csv"
            raise ConfigError(f"data.path is required with data._target_={self.spec._target_}: name the "
                              f"file, as in data.path=my_table.{suffix}")
        super().check()

    def read(self, base_dir: Path) -> pd.DataFrame:
        return read_file(resolve(self.spec.path, base_dir), "data.path", self.kind, self.spec.storage_options,
                         label=self.label, **self._bound())

    def _bound(self) -> dict:
        """data.max_rows bounds what a local file's read holds: of Parquet, the row groups
        pipeline.parquet.row_groups_for picks; of CSV, a sample kept chunk by chunk (pipeline.csv_sample)."""
        return {"max_rows": self.spec.max_rows, "seed": self.spec.seed if self.spec.seed is not None else 0}

    def local_path(self, base_dir: Path) -> Optional[Path]:
        path = resolve(self.spec.path, base_dir) if self.spec.path else None
        return path if isinstance(path, Path) else None

    def location(self, base_dir: Path) -> str:
        return where(self.spec.path, base_dir)

    def columns(self, base_dir: Path) -> Optional[list[str]]:
        path = self.local_path(base_dir)
        return None if path is None else header(path, self.kind, "data.path")

    def label_values(self, base_dir: Path) -> Optional[pd.Series]:
        path = self.local_path(base_dir)
        if path is None:
            return None
        return label_column(path, self.kind, self.label, "data.path", **self._bound())


class CsvSource(FileSource):
    """A CSV file (data=csv)."""

    kind = "csv"


class ParquetSource(FileSource):
    """A Parquet file (data=parquet)."""

    kind = "parquet"


class SyntheticSource(DataSource):
    """A seeded scikit-learn classification or regression table; some columns binned into categories."""

    kind = "synthetic"

    @property
    def label(self) -> str:
        return "target"

    def check(self) -> None:
        spec = self.spec
        if spec.rows < 10 or spec.features < 1:
            raise ConfigError(f"data.rows={spec.rows} and data.features={spec.features}: need >= 10 rows and >= 1 feature")
        if spec.classes == 1 or spec.classes < 0:
            raise ConfigError(f"data.classes={spec.classes}: 0 for regression, or 2 or more classes")
        if not 0 <= spec.categorical_features <= spec.features:
            raise ConfigError(
                f"data.categorical_features={spec.categorical_features} must be between 0 and data.features={spec.features}"
            )

    def read(self, base_dir: Path) -> pd.DataFrame:
        return synthetic(self.spec)

    def problem_type(self, base_dir: Path) -> Optional[str]:
        if self.spec.problem_type != "auto":
            return self.spec.problem_type
        return {0: "regression", 2: "binary"}.get(self.spec.classes, "multiclass")

    def location(self, base_dir: Path) -> str:
        spec = self.spec
        return (f"generator:scikit-learn rows={spec.rows} features={spec.features} classes={spec.classes} "
                f"categorical={spec.categorical_features} seed={spec.seed or 0}")


def synthetic(spec: DataConf) -> pd.DataFrame:
    """A seeded classification or regression table; some columns binned into categories."""
    import numpy as np
    import pandas as pd
    from sklearn.datasets import make_classification, make_regression

    seed = spec.seed or 0
    informative = max(1, min(spec.features, max(2, spec.features // 2)))
    if spec.classes >= 2:
        X, y = make_classification(
            n_samples=spec.rows, n_features=spec.features, n_informative=min(informative, spec.features),
            n_redundant=0, n_classes=spec.classes, n_clusters_per_class=1 if spec.classes > 4 else 2,
            random_state=seed, flip_y=0.02,
        )
    else:
        X, y = make_regression(
            n_samples=spec.rows, n_features=spec.features, n_informative=informative, noise=10.0,
            random_state=seed,
        )
    X = X.astype(np.float32)
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(spec.features)])
    for i in range(spec.categorical_features):
        column = f"x{i}"
        bins = np.quantile(X[:, i], np.linspace(0, 1, 9)[1:-1])
        frame[column] = pd.Categorical.from_codes(np.digitize(X[:, i], bins), [f"c{j}" for j in range(8)])
        frame = frame.rename(columns={column: f"cat{i}"})
    frame["target"] = y
    return frame


def resolve(path: str, base_dir: Path) -> Union[Path, str]:
    """A local path (relative to base_dir), or a remote URL as given."""
    if "://" in path:  # a remote URL (s3://, gs://, https://) is read by pandas through fsspec
        return path
    p = Path(path).expanduser()
    return p if p.is_absolute() else base_dir / p


def where(path: str, base_dir: Path) -> str:
    """A path or URL as the tracker shows it: absolute, credentials masked."""
    from pipeline.redact import redact_uri

    resolved = resolve(path, base_dir)
    return str(resolved) if isinstance(resolved, Path) else redact_uri(resolved)


def source_for(spec: DataConf, source: Optional[DataSource] = None) -> DataSource:
    """`source`, the run's own (pipeline.settings.Settings.source, made once), else a new one from `spec`."""
    return source if source is not None else spec.make_source()


def check_before_reading(spec: "DataConf", base_dir: Path, source: Optional[DataSource] = None) -> None:
    """What can be checked of the data without reading it, before the plan: the source's config
    (DataSource.check), its local files (data.path, data.test_path) exist and are not empty, and the
    columns the config names (label, drop_columns, categorical_columns) are in the file's header or
    schema."""
    source = source_for(spec, source)
    source.check()
    path = source.local_path(base_dir)
    if path is not None:
        check_file(path, "data.path")
    columns = source.columns(base_dir)
    if columns is not None and source.label:
        check_column_names(columns, spec, source.label, "data.path")
    test = resolve(spec.test_path, base_dir) if spec.test_path else None
    if isinstance(test, Path):
        check_file(test, "data.test_path")
        if source.label:
            check_column_names(header(test, None, "data.test_path"), spec, source.label, "data.test_path")


def check_column_names(columns: list[str], spec: "DataConf", label: str, key: str) -> None:
    """The columns the config names are columns of the table: DataError naming the key and the closest."""
    columns = [str(c) for c in columns]
    if label not in columns:
        raise DataError(
            f"data.label={label!r} is not a column of {key}{closest(label, columns)}; columns: {', '.join(columns)}"
        )
    missing = [c for c in spec.drop_columns if c not in columns]
    if missing:
        raise DataError(f"data.drop_columns names {missing}, which are not columns; columns: {', '.join(columns)}")
    unknown = [c for c in spec.categorical_columns if c not in columns]
    if unknown:
        raise DataError(f"data.categorical_columns names {unknown}, which are not columns; columns: {', '.join(columns)}")
