"""A seeded sample of `max_rows` rows of a local CSV file (data.max_rows), read a chunk at a time.

Every row of the file gets a seeded random key (one stream, drawn in file order, whatever the chunk
size); the `max_rows` rows with the smallest keys, among those whose label is not missing, are a
uniform sample without replacement. Only the rows whose key could still be among the smallest are
kept between chunks, so what the read holds grows with `max_rows` and the chunk, not with the file.
A reader of the label column alone keeps the same rows, so the problem type learnt from it before
the table is read is the one loading learns.

pandas infers each chunk's dtypes on its own, as its whole-file read does over the parser's own
chunks, and then promotes them as that read does (int and float to float, numbers and text to
objects; a chunk where a column holds nothing does not count): one value of each dtype a column
takes in any chunk is kept until the end, so the sample's dtypes are those of every chunk together,
not only of the chunks it drew from.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from pipeline.csv_dialect import options
from pipeline.errors import DataError

log = logging.getLogger(__name__)

CHUNK_BYTES = 8 * 2**20  # about what one chunk of text holds; a file no larger is read whole, as before
KEY_STREAM = 0x637376  # the row keys draw from a stream of their own, not default_rng(seed)'s


def sample_csv(path: Path, max_rows: Optional[int], seed: int, label: Optional[str] = None,
               usecols: Optional[list[str]] = None) -> Optional[pd.DataFrame]:
    """`max_rows` rows of the CSV at `path` whose `label` is not missing, drawn uniformly with `seed`,
    in the file's order (fewer when the file holds fewer); None when there is no bound or the file fits
    in one chunk: it is then read whole, and sampled after, as it always was."""
    if max_rows is None or path.stat().st_size <= CHUNK_BYTES:
        return None
    rng = np.random.default_rng([seed, KEY_STREAM])
    parts: list[tuple[pd.DataFrame, np.ndarray]] = []
    witnesses: dict[str, dict[str, pd.Series]] = {}  # column -> dtype -> one value of it
    threshold, held, missing = np.inf, 0, 0
    with pd.read_csv(path, usecols=usecols, chunksize=_chunk_rows(path), **options(path)) as reader:
        for chunk in reader:
            keys = rng.random(len(chunk))
            if label is not None and label in chunk.columns:
                absent = chunk[label].isna().to_numpy()
                missing += int(absent.sum())
                keys[absent] = np.inf
            _witness(chunk, witnesses)
            take = np.flatnonzero(keys < threshold)
            if len(take) > max_rows:  # only this chunk's max_rows smallest can be among the smallest
                take = np.sort(take[np.argpartition(keys[take], max_rows - 1)[:max_rows]])
            parts.append((chunk.iloc[take], keys[take]))
            held += len(take)
            del chunk
            if held > 2 * max_rows:
                parts = [_smallest(parts, max_rows)]
                held = len(parts[0][1])
                threshold = parts[0][1].max() if held == max_rows else np.inf
    if not parts:  # a header and no rows
        return pd.read_csv(path, usecols=usecols, **options(path))
    frame, _ = _smallest(parts, max_rows)
    if missing and frame.empty:
        raise DataError(f"data.label={label!r}: every value of the label column is missing (NaN)")
    if missing:
        log.warning("data.label=%r: %d of the file's rows have no label; the %d sampled rows are drawn "
                    "from the others", label, missing, len(frame))
    frame = frame.sort_index(kind="stable").reset_index(drop=True)
    for column, values in witnesses.items():
        if not values:  # empty in every chunk: as each chunk read it
            continue
        dtype = pd.concat(list(values.values()), ignore_index=True).dtype
        if frame[column].dtype != dtype:
            frame[column] = frame[column].astype(dtype)
    return frame


def _witness(chunk: pd.DataFrame, witnesses: dict[str, dict[str, pd.Series]]) -> None:
    """Keep one value of each column whose dtype in this chunk is new to it (where it holds any)."""
    for column in chunk.columns:
        values = chunk[column]
        seen = witnesses.setdefault(column, {})
        if str(values.dtype) not in seen:
            present = np.flatnonzero(values.notna().to_numpy())
            if len(present):
                seen[str(values.dtype)] = values.iloc[present[:1]]


def _smallest(parts: list[tuple[pd.DataFrame, np.ndarray]], n: int) -> tuple[pd.DataFrame, np.ndarray]:
    """The rows of `parts` with the n smallest finite keys, and their keys."""
    frame = pd.concat([p for p, _ in parts]) if len(parts) > 1 else parts[0][0]
    keys = np.concatenate([k for _, k in parts])
    order = np.flatnonzero(np.isfinite(keys))
    if len(order) > n:
        order = order[np.argpartition(keys[order], n - 1)[:n]]
    return frame.iloc[order], keys[order]


def _chunk_rows(path: Path) -> int:
    """Rows in about CHUNK_BYTES of the file, from the length of its first lines."""
    with path.open("rb") as fh:
        head = fh.read(1 << 16)
    lines = max(1, head.count(b"\n"))
    return max(1000, CHUNK_BYTES * lines // max(1, len(head)))
