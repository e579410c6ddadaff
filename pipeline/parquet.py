"""A local Parquet file read a column at a time, as `pd.read_parquet` reads it but with less memory.

pyarrow's whole-table read holds the file's pages and the decoded table at once, and turning a table
of several row groups into pandas blocks copies it again: about 2.5x the table at the peak. Here the
numeric columns without missing values are decoded one at a time into one 2D block per dtype (the
block pandas would build), so the peak is the table plus one column; every other column (text,
categories, dates, numbers with missing values) goes through pyarrow's own conversion. The columns
are decoded on as many threads as the process may run on (pyarrow lets go of the GIL while it
decodes), each with its own handle on the file, so the peak is the table plus one column per thread.
The frame is assembled from those blocks without a copy
(`pandas.api.internals.create_dataframe_from_blocks`, the function pyarrow itself uses). A file whose pandas metadata stores an index, or with nested columns,
is read by `pd.read_parquet`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd


def row_groups_for(source, max_rows: Optional[int], seed: int) -> Optional[list[int]]:
    """The row groups of the ParquetFile `source` to read when at most `max_rows` rows are used
    (data.max_rows): whole groups, drawn in a seeded random order until they hold `max_rows` rows, so
    what is read (and held) grows with max_rows, not with the file; None (every group) when the file
    holds no more rows, or has a single group."""
    meta = source.metadata
    if max_rows is None or meta.num_rows <= max_rows or meta.num_row_groups <= 1:
        return None
    chosen, rows = [], 0
    for group in np.random.default_rng(seed).permutation(meta.num_row_groups):
        chosen.append(int(group))
        rows += meta.row_group(int(group)).num_rows
        if rows >= max_rows:
            break
    return sorted(chosen)


def read_parquet(path: Path, max_rows: Optional[int] = None, seed: int = 0) -> pd.DataFrame:
    """The table in `path`; with `max_rows`, only the row groups row_groups_for picks."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = pq.ParquetFile(path)
    groups = row_groups_for(source, max_rows, seed)
    if groups is not None:  # a bounded part of the file: pyarrow's own conversion is small enough
        return source.read_row_groups(groups, use_pandas_metadata=True).to_pandas().reset_index(drop=True)
    schema = source.schema_arrow
    index = (schema.pandas_metadata or {}).get("index_columns") or []
    flat = all(not pa.types.is_nested(f.type) for f in schema)
    if not flat or any(not isinstance(i, dict) or i.get("kind") != "range" for i in index):
        return pd.read_parquet(path)
    rows = source.metadata.num_rows
    complete = _without_missing(source)
    by_dtype: dict[np.dtype, list[int]] = {}
    for position, field in enumerate(schema):
        if field.name in complete and (pa.types.is_integer(field.type) or pa.types.is_floating(field.type)):
            dtype = np.dtype(field.type.to_pandas_dtype())
            if dtype.itemsize >= 4:  # float16 and small integers: pandas' own conversion
                by_dtype.setdefault(dtype, []).append(position)
    blocks, columns = [], []
    for dtype, positions in by_dtype.items():
        block = np.empty((len(positions), rows), dtype=dtype)
        columns += [(schema[position].name, block[row]) for row, position in enumerate(positions)]
        blocks.append((block, np.asarray(positions)))
    _read_columns(source, path, columns)
    in_blocks = {p for positions in by_dtype.values() for p in positions}
    others = [p for p in range(len(schema)) if p not in in_blocks]
    if others:
        rest = source.read(columns=[schema[p].name for p in others], use_pandas_metadata=False).to_pandas()
        for position, column in zip(others, rest.columns):
            values = rest[column].array
            if isinstance(values, pd.arrays.NumpyExtensionArray):  # a numpy column: a 2D block of one row
                values = values.to_numpy().reshape(1, -1)
            blocks.append((values, np.asarray([position])))
    from pandas.api.internals import create_dataframe_from_blocks

    return create_dataframe_from_blocks(blocks, pd.RangeIndex(rows), pd.Index(schema.names))


def _without_missing(source) -> set[str]:
    """Columns whose row groups' statistics all say they hold no missing value."""
    meta = source.metadata
    names = [meta.schema.column(j).name for j in range(meta.num_columns)]
    complete = set(names)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for j, name in enumerate(names):
            stats = group.column(j).statistics
            if stats is None or not stats.has_null_count or stats.null_count:
                complete.discard(name)
    return complete


def _read_columns(source, path: Path, columns: list[tuple[str, np.ndarray]]) -> None:
    """Decode each (name, out) column of the file into `out`, on up to one thread per usable core:
    this thread reads through `source`, every other opens its own handle on `path`."""
    import os
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    local = threading.local()
    local.source = source

    def read(column: tuple[str, np.ndarray]) -> None:
        if not hasattr(local, "source"):
            local.source = pq.ParquetFile(path)
        _read_into(local.source, *column)

    threads = min(len(os.sched_getaffinity(0)), len(columns))
    if threads <= 1:
        for column in columns:
            read(column)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="parquet") as pool:
        list(pool.map(read, columns))


def _read_into(source, name: str, out: np.ndarray) -> None:
    """Decode one column into `out` (a row of a block), a row group's chunk at a time."""
    start = 0
    for chunk in source.read(columns=[name], use_pandas_metadata=False).column(0).chunks:
        values = chunk.to_numpy(zero_copy_only=False)
        out[start:start + len(values)] = values
        start += len(values)
