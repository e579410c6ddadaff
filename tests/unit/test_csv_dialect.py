"""A CSV's encoding and separator found from its first bytes, and every reader taking them."""

import logging
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from pipeline import csv_dialect
from pipeline.csv_dialect import Dialect, dialect
from pipeline.table_files import header, label_column, read_file

FRAME = pd.DataFrame({"ville": ["Besançon", "Zürich", "Köln"] * 20, "prix": [1.5, 2.25, 3.0] * 20,
                      "y": [0, 1, 0] * 20})


@pytest.mark.parametrize("sep,encoding", [(",", "utf-8"), (";", "cp1252"), ("\t", "utf-8"), ("|", "latin-1"),
                                          (";", "utf-8-sig")])
def test_each_dialect_is_found_and_every_reader_reads_the_same_table(tmp_path, sep, encoding):
    path = tmp_path / "t.csv"
    FRAME.to_csv(path, sep=sep, encoding=encoding, index=False)
    found = dialect(path)
    assert found.sep == sep
    assert found.encoding == ("cp1252" if encoding == "latin-1" else encoding)  # cp1252 decodes it the same
    assert header(path, "csv", "data.path") == ["ville", "prix", "y"]
    assert label_column(path, "csv", "y", "data.path").tolist() == FRAME["y"].tolist()
    pd.testing.assert_frame_equal(read_file(path, "data.path"), FRAME)


def test_utf8_and_commas_are_read_as_pandas_reads_them_and_nothing_is_said(tmp_path, caplog):
    path = tmp_path / "plain.csv"
    FRAME.to_csv(path, index=False)
    with caplog.at_level(logging.INFO, logger="pipeline.csv_dialect"):
        assert dialect(path) == Dialect() and csv_dialect.options(path) == {}
    assert not caplog.records


def test_another_dialect_is_said_once_per_version_of_the_file(tmp_path, caplog):
    path = tmp_path / "euro.csv"
    FRAME.to_csv(path, sep=";", encoding="cp1252", index=False)
    with caplog.at_level(logging.INFO, logger="pipeline.csv_dialect"):
        dialect(path), dialect(path)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "read as CSV separated by ';' and encoded as cp1252" in line


def test_a_character_cut_by_the_end_of_the_first_bytes_is_still_utf8(tmp_path):
    path = tmp_path / "long.csv"
    cell = "é" * (csv_dialect.HEAD_BYTES // 2 + 1)  # two bytes each: the read ends inside one
    path.write_bytes(f"a,b\n{cell},1\n".encode()[:csv_dialect.HEAD_BYTES - 1] + "é,1\n".encode())
    assert dialect(path).encoding == "utf-8"


def test_a_comma_in_a_header_of_several_columns_keeps_the_comma(tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text("a;x,b\n1;2,3\n")  # two columns by commas: a ';' inside a name is not a separator
    assert dialect(path).sep == ","


def test_prediction_chunks_read_the_dialect(tmp_path):
    from pipeline.chunks import columns_of, read_chunks

    path = tmp_path / "euro.csv"
    FRAME.to_csv(path, sep=";", encoding="cp1252", index=False)
    assert columns_of(path, "csv") == ["ville", "prix", "y"]
    chunks = list(read_chunks(path, "csv", ["ville", "prix"], {"ville"}, {"prix"}, chunk_rows=25))
    joined = pd.concat(chunks, ignore_index=True)
    assert joined["ville"].tolist() == FRAME["ville"].tolist() and np.allclose(joined["prix"], FRAME["prix"])


def test_a_nullable_integer_or_boolean_column_is_summarised_for_tracking():
    from pipeline.tracking.datasets import summarize

    X = pd.DataFrame({"n": np.zeros(4, np.float32), "b": np.zeros(4, np.float32)})
    data = SimpleNamespace(X=X, raw_dtypes={"n": "Int64", "b": "boolean"}, train_idx=[0, 1], val_idx=[2],
                           test_idx=[3], name="t", fingerprint="f", label="y", problem_type="binary")
    assert dict(summarize(data).columns) == {"n": "long", "b": "boolean"}


def test_a_spreadsheets_unicode_text_export_is_read(tmp_path):
    path = tmp_path / "unicode.txt"
    FRAME.to_csv(path, sep="\t", encoding="utf-16", index=False)
    assert dialect(path) == Dialect("utf-16", "\t")
    pd.testing.assert_frame_equal(read_file(path, "data.path", kind="csv"), FRAME)


def test_a_parquet_or_binary_file_read_as_csv_is_named_for_what_it_is(tmp_path):
    from pipeline.errors import DataError

    FRAME.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(DataError, match="is a Parquet file, not a CSV one: data=parquet reads it"):
        header(tmp_path / "t.parquet", "csv", "data.path")
    (tmp_path / "blob.csv").write_bytes(b"a,b\n\x00\x01\x02,3\n")
    with pytest.raises(DataError, match="is not a CSV file: it holds NUL bytes"):
        read_file(tmp_path / "blob.csv", "data.path")
