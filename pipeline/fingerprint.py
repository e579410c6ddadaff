"""The data's fingerprint: a hash of a loaded table's content and split, part of every task's cache key."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pandas as pd


def fingerprint(data) -> str:
    """A hash of a TabularData's content and split: part of every task's cache key. Each column, the
    labels and each part of the split go to a SHA-256 of their own as they lie (a categorical column as
    its codes and categories), without a copy of the table; their digests go to one SHA-256."""
    parts = [_column_part(str(name), data.X[name]) for name in data.X.columns]
    parts.append(("labels", data.y))
    parts += [(name, idx) for name, idx in
              (("train", data.train_idx), ("validation", data.val_idx), ("test", data.test_idx))]
    h = hashlib.sha256(data.problem_type.encode())
    for digest in _digests(parts):
        h.update(digest)
    return h.hexdigest()[:16]


PARALLEL_HASH_BYTES = 64 * 2**20  # below this, threads cost more than they save


def _column_part(name: str, values: pd.Series) -> tuple[str, np.ndarray]:
    head = f"{name}\0{values.dtype}"
    if isinstance(values.dtype, pd.CategoricalDtype):
        return f"{head}\0{list(values.cat.categories)!r}", values.cat.codes.to_numpy()
    return head, values.to_numpy()


def _digests(parts: list[tuple[str, np.ndarray]]) -> list[bytes]:
    """Each (name, array)'s SHA-256, in order; a large table's on one thread per core (hashlib lets go
    of the GIL while it hashes a large buffer, so they run at once)."""
    size = sum(values.nbytes for _, values in parts)
    threads = min(len(parts), len(os.sched_getaffinity(0)))
    if size < PARALLEL_HASH_BYTES or threads < 2:
        return [_digest(name, values) for name, values in parts]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads, thread_name_prefix="fingerprint") as pool:
        return list(pool.map(lambda part: _digest(*part), parts))


def _digest(name: str, values: np.ndarray) -> bytes:
    h = hashlib.sha256(f"{name}\0{values.shape}\0".encode())
    h.update(memoryview(np.ascontiguousarray(values)).cast("B"))
    return h.digest()
