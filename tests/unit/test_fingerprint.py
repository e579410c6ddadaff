"""The data fingerprint (part of every task's cache key): what changes it, and the same value whether the
columns are hashed on one thread or several."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest

from pipeline import data as td
from pipeline import fingerprint as fp


def table(rows: int = 1000, **changes) -> td.TabularData:
    rng = np.random.default_rng(0)
    block = rng.normal(size=(rows, 3)).astype(np.float32)
    X = pd.DataFrame(block, columns=["a", "b", "c"])
    X.insert(1, "colour", pd.Categorical(rng.choice(["red", "blue"], rows), categories=["blue", "red"]))
    order = np.arange(rows)
    parts = dict(X=X, y=(block[:, 0] > 0).astype(np.int64), problem_type="binary", label="t", classes=[0, 1],
                 categorical=["colour"], numeric=["a", "b", "c"], train_idx=order[:600],
                 val_idx=order[600:800], test_idx=order[800:])
    parts.update(changes)
    return td.TabularData(**parts)


@pytest.fixture
def threaded(monkeypatch):
    """Every table counts as large and the process has two cores: the columns hash on threads."""
    monkeypatch.setattr(fp, "PARALLEL_HASH_BYTES", 0)
    monkeypatch.setattr(fp.os, "sched_getaffinity", lambda pid: {0, 1})


def test_threads_hash_the_columns_and_give_the_serial_value(monkeypatch):
    monkeypatch.setattr(fp, "PARALLEL_HASH_BYTES", 10**12)
    serial_value = fp.fingerprint(table())
    monkeypatch.setattr(fp, "PARALLEL_HASH_BYTES", 0)
    monkeypatch.setattr(fp.os, "sched_getaffinity", lambda pid: {0, 1})
    threads = []
    digest = fp._digest
    monkeypatch.setattr(fp, "_digest",
                        lambda *part: threads.append(threading.current_thread().name) or digest(*part))
    assert fp.fingerprint(table()) == serial_value
    assert len(threads) == 8 and all(name.startswith("fingerprint") for name in threads), threads


def changed_value() -> td.TabularData:
    data = table()
    X = data.X.copy()
    X.loc[5, "c"] = np.float32(X.loc[5, "c"] + 1)
    data.X = X
    return data


def renamed() -> td.TabularData:
    data = table()
    data.X = data.X.rename(columns={"b": "B"})
    return data


def recategorised() -> td.TabularData:
    data = table()
    X = data.X.copy()
    X["colour"] = X["colour"].cat.rename_categories({"red": "green"})  # the same codes, other names
    data.X = X
    return data


@pytest.mark.parametrize("other", [
    changed_value, renamed, recategorised,
    lambda: table(y=1 - table().y),
    lambda: table(train_idx=np.arange(590), val_idx=np.arange(590, 800)),
    lambda: table(problem_type="multiclass"),
], ids=["a value", "a column name", "category names", "labels", "split", "problem type"])
def test_any_change_changes_the_fingerprint(threaded, other):
    assert fp.fingerprint(other()) != fp.fingerprint(table())
