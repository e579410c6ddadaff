"""Local and remote table files read as a data source reads them: a header, a label column, a whole
table (of a local file with data.max_rows, only what the sample needs); every failure is a DataError
naming the config key."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from pipeline.errors import DataError

if TYPE_CHECKING:
    import pandas as pd


def check_file(path: Path, key: str = "data.path") -> None:
    """DataError unless `path` is a file with something in it."""
    if not path.exists():
        raise DataError(f"{key}={str(path)!r}: no such file")
    if path.is_dir():
        raise DataError(f"{key}={str(path)!r} is a directory, not a data file")
    if path.stat().st_size == 0:
        raise DataError(f"{key}={str(path)!r} is empty")



def header(path: Path, kind: Optional[str], key: str) -> list[str]:
    """A local CSV's header row or a Parquet file's schema names, without reading the rows; a file that
    cannot be read is a DataError naming `key`."""
    kind = kind or ("parquet" if path.suffix in (".parquet", ".pq") else "csv")
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return [str(name) for name in pq.read_schema(path).names if not str(name).startswith("__index_level_")]
        from pipeline.csv_dialect import first_row

        # an empty name as pandas reads it (a written row index)
        return [name or f"Unnamed: {i}" for i, name in enumerate(first_row(path))]
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{key}={str(path)!r} cannot be read: {type(exc).__name__}: {exc}") from None



def label_column(path: Path, kind: Optional[str], label: str, key: str, max_rows: Optional[int] = None,
                 seed: int = 0) -> pd.Series:
    """One column of a local CSV or Parquet file, read without the others (of a Parquet file, only the
    row groups `max_rows` needs; of a CSV file larger than a chunk, the labels of the `max_rows` rows
    its bounded read keeps); a DataError names `key`."""
    kind = kind or ("parquet" if path.suffix in (".parquet", ".pq") else "csv")
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            from pipeline.parquet import row_groups_for

            source = pq.ParquetFile(path)
            groups = row_groups_for(source, max_rows, seed)
            table = source.read([label]) if groups is None else source.read_row_groups(groups, [label])
            return table.column(0).to_pandas()
        import pandas as pd

        from pipeline.csv_dialect import options
        from pipeline.csv_sample import sample_csv

        sample = sample_csv(path, max_rows, seed, label, usecols=[label])
        return (pd.read_csv(path, usecols=[label], **options(path)) if sample is None else sample)[label]
    except MemoryError as exc:  # pyarrow's ArrowMemoryError is one
        raise _too_big(path, key, exc) from None
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"{key}={str(path)!r} cannot be read: {type(exc).__name__}: {exc}") from None



def _too_big(path: Path, key: str, exc: BaseException) -> DataError:
    return DataError(f"{key}={str(path)!r} cannot be read: memory ran out while reading it ({exc}); set "
                     "data.max_rows to read fewer rows (a Parquet file is then read a row group at a time, "
                     "only as many as the rows need; a CSV file a chunk at a time, keeping only the sample)")



def read_file(path, key: str, kind: Optional[str] = None, storage_options: Optional[dict] = None,
              max_rows: Optional[int] = None, seed: int = 0, label: Optional[str] = None) -> pd.DataFrame:
    """A CSV or Parquet table (kind, else by suffix); every failure is a DataError naming `key`. With
    `max_rows`, a local file's read holds about that many rows (whole row groups of Parquet; of CSV,
    a seeded sample of the rows with a `label`), not the whole table."""
    if not isinstance(path, Path):
        return _read_remote(path, key, kind, storage_options)
    import pandas as pd

    check_file(path, key)
    kind = kind or ("parquet" if path.suffix in (".parquet", ".pq") else "csv")
    try:
        if kind == "csv":
            from pipeline import csv_dialect
            from pipeline.csv_sample import sample_csv

            header = csv_dialect.first_row(path)
            _check_unique(header, key, path)
            frame = sample_csv(path, max_rows, seed, label if label in header else None)
            if frame is None:
                frame = pd.read_csv(path, **csv_dialect.options(path))
        else:
            from pipeline.parquet import read_parquet

            frame = read_parquet(path, max_rows, seed)
    except DataError:
        raise
    except MemoryError as exc:
        raise _too_big(path, key, exc) from None
    except Exception as exc:  # pandas/pyarrow parse errors carry the useful detail
        raise DataError(f"{key}={str(path)!r} cannot be read as {kind}: {exc}") from None
    _check_unique(list(frame.columns), key, path)
    if frame.empty:
        raise DataError(f"{key}={str(path)!r} has a header but no rows")
    return frame



def _read_remote(url: str, key: str, kind: Optional[str], storage_options: Optional[dict]) -> pd.DataFrame:
    import pandas as pd

    from pipeline.redact import redact_uri

    kind = kind or ("parquet" if url.endswith((".parquet", ".pq")) else "csv")
    reader = pd.read_parquet if kind == "parquet" else pd.read_csv
    try:
        frame = reader(url, storage_options=storage_options or None)
    except Exception as exc:  # fsspec/network errors: the user's URL, credentials or connectivity
        raise DataError(f"{key}={redact_uri(url)!r} cannot be read: {type(exc).__name__}: {exc}") from None
    _check_unique(list(frame.columns), key, redact_uri(url))
    if frame.empty:
        raise DataError(f"{key}={redact_uri(url)!r} has no rows")
    return frame



def _check_unique(columns: list, key: str, path) -> None:
    seen, dups = set(), []
    for c in columns:
        if c in seen and c not in dups:
            dups.append(c)
        seen.add(c)
    if dups:
        raise DataError(f"{key}={str(path)!r}: duplicate column names {dups}; every column needs its own name")
