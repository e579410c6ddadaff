"""data.max_rows on a CSV file: a seeded uniform sample kept chunk by chunk, with the whole read's dtypes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import csv_sample
from pipeline.table_files import label_column, read_file
from pipeline.errors import DataError

ROWS = 200_000


@pytest.fixture(scope="module")
def numbered(tmp_path_factory) -> Path:
    """200,000 rows (about 3 MB) numbered in file order, a label on all but every 50th."""
    i = np.arange(ROWS)
    frame = pd.DataFrame({"row": i, "x": (i % 97) / 7, "label": np.where(i % 50 == 0, np.nan, i % 3)})
    path = tmp_path_factory.mktemp("csv") / "numbered.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of about 64 KB, so a file of a few MB is read in many."""
    monkeypatch.setattr(csv_sample, "CHUNK_BYTES", 1 << 16)


def test_the_sample_is_seeded_and_drawn_from_the_whole_file(numbered, small_chunks):
    first = read_file(numbered, "data.path", "csv", max_rows=2000, seed=1, label="label")
    assert len(first) == 2000 and first["label"].notna().all()
    assert first.equals(read_file(numbered, "data.path", "csv", max_rows=2000, seed=1, label="label"))
    other = read_file(numbered, "data.path", "csv", max_rows=2000, seed=2, label="label")
    assert len(set(first["row"]) & set(other["row"])) < 100  # two independent draws share about 20 rows
    quarters = np.bincount(first["row"] * 4 // ROWS, minlength=4)
    assert quarters.min() > 400, quarters  # about 500 from each quarter of the file, not only its head
    assert first["row"].is_monotonic_increasing  # in the file's order


def test_the_label_read_alone_keeps_the_rows_the_table_read_keeps(numbered, small_chunks):
    table = read_file(numbered, "data.path", "csv", max_rows=2000, seed=3, label="label")
    alone = label_column(numbered, "csv", "label", "data.path", max_rows=2000, seed=3)
    assert alone.reset_index(drop=True).equals(table["label"])


def test_a_file_of_one_chunk_is_read_whole_as_before(numbered):
    assert csv_sample.sample_csv(numbered, 2000, 0, "label") is None  # 3 MB: below a chunk
    assert len(read_file(numbered, "data.path", "csv", max_rows=2000, label="label")) == ROWS


def test_dtypes_are_those_of_the_whole_files_read(tmp_path, small_chunks):
    """Columns whose chunks infer different dtypes come out as pandas' read of the whole file types them."""
    n = 20_000
    i = np.arange(n)
    late = i >= n - 5  # only the last chunk differs
    frame = pd.DataFrame({
        "ints": i.astype(str),
        "ints_missing_late": np.where(late, "", i.astype(str)),
        "bools_missing_late": np.where(late, "", np.where(i % 2, "True", "False")),
        "text_with_missing": np.where(i % 7 == 0, "", np.array(["a", "b", "c"])[i % 3]),
        "text_only_late": np.where(late, "zz", ""),
        "empty": "",
        "floats": (i / 3).round(2).astype(str),
        "dates": np.array([f"2024-01-0{k % 9 + 1}" for k in range(n)]),
        "label": (i % 2).astype(str),
    })
    path = tmp_path / "mixed.csv"
    frame.to_csv(path, index=False)
    whole = pd.read_csv(path)
    sample = csv_sample.sample_csv(path, n, 0, "label")  # every row kept: the whole read's values too
    assert sample.dtypes.to_dict() == whole.dtypes.to_dict()
    pd.testing.assert_frame_equal(sample, whole)
    drawn = csv_sample.sample_csv(path, 100, 0, "label")  # drawn from chunks where every column is plain
    assert drawn.dtypes.to_dict() == whole.dtypes.to_dict()


def test_rows_without_a_label_are_not_drawn_and_a_file_without_labels_is_refused(tmp_path, small_chunks):
    path = tmp_path / "unlabelled.csv"
    pd.DataFrame({"x": np.arange(50_000), "label": np.nan}).to_csv(path, index=False)
    with pytest.raises(DataError, match="every value of the label column is missing"):
        read_file(path, "data.path", "csv", max_rows=100, label="label")


def test_memory_running_out_between_chunks_is_a_data_error_naming_the_file(numbered, small_chunks,
                                                                            monkeypatch):
    from pandas.io.parsers.readers import TextFileReader

    read = TextFileReader.get_chunk
    calls = []

    def out_of_memory(self, size=None):
        calls.append(size)
        if len(calls) == 3:
            raise MemoryError("Unable to allocate 3.0 GiB")
        return read(self, size)

    monkeypatch.setattr(TextFileReader, "get_chunk", out_of_memory)
    with pytest.raises(DataError, match=f"data.path='{numbered}' cannot be read: memory ran out"):
        read_file(numbered, "data.path", "csv", max_rows=2000, label="label")
    with pytest.raises(DataError, match=f"data.path='{numbered}' cannot be read: memory ran out"):
        calls.clear()
        label_column(numbered, "csv", "label", "data.path", max_rows=2000)


def test_a_bound_above_the_files_rows_loads_what_the_whole_read_loads(numbered, small_chunks):
    from pipeline.config import DataConf
    from pipeline.data import load

    def loaded(max_rows):
        spec = DataConf(name="csv", _target_="pipeline.data_sources.CsvSource", path=str(numbered),
                        label="label", max_rows=max_rows)
        return load(spec, numbered.parent)

    assert loaded(ROWS).fingerprint == loaded(None).fingerprint
    assert len(loaded(2000).X) == 2000
