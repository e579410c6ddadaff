"""Read a data source in chunks of rows and write predictions chunk by chunk, so a file larger
than memory streams through: CSV through pyarrow's streaming reader, Parquet by record batches.

Sources that are not local files (bundled, synthetic, URLs) are read whole by pipeline.data.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator

import pandas as pd

from pipeline.errors import DataError

BLOCK_BYTES = 1 << 22  # pyarrow CSV block: rows are regrouped into chunk_rows afterwards


def columns_of(path: Path, kind: str) -> list[str]:
    if kind == "parquet":
        import pyarrow.parquet as pq

        return list(pq.ParquetFile(path).schema_arrow.names)
    from pipeline.csv_dialect import first_row

    return first_row(path)


def read_chunks(path: Path, kind: str, columns: list[str], categorical: set[str], numeric: set[str],
                chunk_rows: int, key: str = "data.path") -> Iterator[pd.DataFrame]:
    """`columns` of the file, `chunk_rows` rows at a time; from CSV, categorical columns as text,
    numeric ones as numbers, others (an id column) as pyarrow infers them."""
    if kind == "parquet":
        import pyarrow.parquet as pq

        batches = pq.ParquetFile(path).iter_batches(batch_size=chunk_rows, columns=columns)
    else:
        batches = _csv_batches(path, columns, categorical, numeric, key)
    yield from _regroup(batches, chunk_rows)


def _csv_batches(path: Path, columns: list[str], categorical: set[str], numeric: set[str], key: str):
    import pyarrow as pa
    from pyarrow import csv as pacsv

    types = {c: pa.string() for c in columns if c in categorical}
    types.update({c: pa.float64() for c in columns if c in numeric})
    options = pacsv.ConvertOptions(include_columns=columns, column_types=types, strings_can_be_null=True)
    try:
        from pipeline.csv_dialect import dialect

        written = dialect(path)
        read = pacsv.ReadOptions(block_size=BLOCK_BYTES, encoding=written.encoding)
        parse = pacsv.ParseOptions(delimiter=written.sep)
        reader = pacsv.open_csv(path, read_options=read, parse_options=parse, convert_options=options)
        for batch in reader:
            yield batch
    except pa.ArrowInvalid as exc:
        raise DataError(_conversion_message(str(exc), columns_of(path, "csv"), path, key)) from None


def _conversion_message(text: str, header: list[str], path: Path, key: str) -> str:
    """pyarrow names a column by its position; the user knows it by name."""
    found = re.search(r"CSV column #(\d+)", text)
    value = re.search(r"invalid value '([^']*)'", text)
    if found and int(found.group(1)) < len(header):
        column = header[int(found.group(1))]
        what = f" such as {value.group(1)!r}" if value else ""
        return (f"column {column!r} of {key}={str(path)!r} is numeric in training but holds values that are not "
                f"numbers{what}")
    return f"{key}={str(path)!r} cannot be read as CSV: {text.splitlines()[0]}"


def _regroup(batches, chunk_rows: int) -> Iterator[pd.DataFrame]:
    import pyarrow as pa

    pending, size = [], 0
    for batch in batches:
        pending.append(batch)
        size += batch.num_rows
        while size >= chunk_rows:
            table = pa.Table.from_batches(pending)
            yield table.slice(0, chunk_rows).to_pandas()
            rest = table.slice(chunk_rows)
            pending, size = (rest.to_batches(), rest.num_rows)
    if size:
        yield pa.Table.from_batches(pending).to_pandas()


def frame_chunks(frame: pd.DataFrame, chunk_rows: int) -> Iterator[pd.DataFrame]:
    for start in range(0, len(frame), chunk_rows):
        yield frame.iloc[start : start + chunk_rows]


class ChunkWriter:
    """Appends prediction chunks to a CSV or Parquet file, written under a temporary name and moved
    into place when complete, so a failed run leaves no partial output."""

    def __init__(self, path: Path):
        self.path = path
        from pipeline.store import temporary_name

        self.tmp = temporary_name(path)
        self.parquet = path.suffix in (".parquet", ".pq")
        self.writer, self.rows = None, 0

    def write(self, frame: pd.DataFrame) -> None:
        if self.parquet:
            import pyarrow as pa
            import pyarrow.parquet as pq

            if self.writer is None:
                table = pa.Table.from_pandas(frame, preserve_index=False)
                self.writer = pq.ParquetWriter(self.tmp, table.schema)
            else:
                table = pa.Table.from_pandas(frame, preserve_index=False, schema=self.writer.schema)
            self.writer.write_table(table)
        else:
            frame.to_csv(self.tmp, mode="w" if self.rows == 0 else "a", header=self.rows == 0, index=False)
        self.rows += len(frame)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.tmp.unlink(missing_ok=True)
