"""The data's shape before it is loaded: rows and column kinds, for memory estimates.

Read from what is cheap: Parquet metadata (row count and column types, no data pages), the
synthetic generator's declared size, the first rows of a CSV file and its size on disk. The
row count is capped by `data.max_rows`, as loading caps it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Optional

from pipeline.data_sources import source_for

DEFAULT_CARDINALITY = 64  # categories per categorical column when only the column type is known
SYNTHETIC_CARDINALITY = 8  # data.synthetic bins a column into 8 categories
CSV_SAMPLE_ROWS = 2_000


@dataclass(frozen=True)
class DataShape:
    """Rows of the whole table (test rows included) and its feature columns by kind."""

    rows: int
    numeric: int
    categorical: int
    classes: int = 2  # 0: regression; a guess of 2 when the label is not read
    cardinality: int = DEFAULT_CARDINALITY
    test_rows: Optional[int] = None  # rows of a separate test file, when there is one
    source: str = ""  # how the shape was learnt, for the plan

    @property
    def features(self) -> int:
        return self.numeric + self.categorical

    @property
    def row_bytes(self) -> int:
        """Bytes per row once typed: float32 numbers, int8 category codes, an int64 label."""
        return 4 * self.numeric + (1 if self.cardinality < 128 else 2) * self.categorical + 8

    @property
    def table_bytes(self) -> int:
        return self.rows * self.row_bytes

    def to_json(self) -> dict:
        return {"rows": self.rows, "numeric": self.numeric, "categorical": self.categorical,
                "classes": self.classes, "test_rows": self.test_rows, "source": self.source}


def data_shape(spec, base_dir: Path, source=None) -> Optional[DataShape]:
    """The shape of the table `spec` (a DataConf) names, or None when it cannot be had cheaply
    (a remote URL, a file that does not exist yet: loading reports that). `source`: the run's data
    source (pipeline.settings.Settings.source); made from `spec` when not given."""
    try:
        kind = source_for(spec, source).kind
        shape = _shape(spec, spec.path, base_dir, kind)
    except (OSError, ValueError):
        return None
    if shape is None:
        return None
    rows = shape.rows if spec.max_rows is None else min(shape.rows, spec.max_rows)
    test_rows = None
    if spec.test_path:
        test = None
        try:
            test = _shape(spec, spec.test_path, base_dir, None)
        except (OSError, ValueError):
            pass
        if test is None:
            return None
        test_rows = test.rows
        rows += test.rows
    classes = shape.classes
    if spec.problem_type == "regression":
        classes = 0
    return DataShape(rows, shape.numeric, shape.categorical, classes, shape.cardinality, test_rows, shape.source)


def _shape(spec, path: Optional[str], base_dir: Path, source: Optional[str]) -> Optional[DataShape]:
    if source == "synthetic":
        numeric = spec.features - spec.categorical_features
        return DataShape(spec.rows, numeric, spec.categorical_features, spec.classes, SYNTHETIC_CARDINALITY,
                         source="generator")
    if source == "bundled":
        with importlib_resources.as_file(importlib_resources.files("pipeline.datasets") / f"{path}.parquet") as p:
            return _parquet(Path(p), spec)
    if not path or "://" in path:
        return None
    p = Path(path).expanduser()
    p = p if p.is_absolute() else base_dir / p
    if not p.is_file():
        return None
    kind = source if source in ("csv", "parquet") else ("parquet" if p.suffix in (".parquet", ".pq") else "csv")
    return _parquet(p, spec) if kind == "parquet" else _csv(p, spec)


def _parquet(path: Path, spec) -> DataShape:
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    schema = meta.schema.to_arrow_schema()
    numeric = categorical = 0
    for field in schema:
        if _skip(field.name, spec):
            continue
        kind = field.type
        if (pa.types.is_integer(kind) or pa.types.is_floating(kind)) and field.name not in spec.categorical_columns:
            numeric += 1
        else:
            categorical += 1
    return DataShape(meta.num_rows, numeric, categorical, source="parquet metadata")


def _csv(path: Path, spec) -> DataShape:
    import pandas as pd

    from pipeline.csv_dialect import options

    sample = pd.read_csv(path, nrows=CSV_SAMPLE_ROWS, **options(path))
    size = os.path.getsize(path)
    if len(sample) < CSV_SAMPLE_ROWS:
        rows = len(sample)
    else:
        with path.open("rb") as fh:
            head = b"".join(fh.readline() for _ in range(CSV_SAMPLE_ROWS + 1))
        rows = int(size / (len(head) / (CSV_SAMPLE_ROWS + 1)))
    numeric = categorical = 0
    for column in sample.columns:
        if _skip(str(column), spec):
            continue
        if pd.api.types.is_numeric_dtype(sample[column]) and column not in spec.categorical_columns:
            numeric += 1
        else:
            categorical += 1
    return DataShape(rows, numeric, categorical, source="csv sample and file size")


def _skip(column: str, spec) -> bool:
    return column == spec.label or column in spec.drop_columns
