"""Logging the run's datasets when other runs log the same data at the same moment."""

import pytest

from pipeline.tracking import datasets as td

SUMMARY = td.DataSummary(name="adult", fingerprint="f" * 16, label="income", label_kind="string",
                         columns=(("age", "long"),), rows=(("train", 10), ("validation", 5), ("test", 5)))
WHERE = {"train": "/data/adult.parquet", "validation": "/data/adult.parquet", "test": "/data/adult.parquet"}


def test_a_lost_insert_race_is_retried_and_other_errors_are_not(monkeypatch):
    import mlflow
    from mlflow.exceptions import MlflowException

    calls = []

    def racing(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:  # another run inserted the same dataset first
            raise MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, "
                                  "datasets.name, datasets.digest")

    monkeypatch.setattr(mlflow, "log_inputs", racing)
    td.log_datasets(SUMMARY, WHERE)
    assert len(calls) == 2 and calls[0] == calls[1]

    def broken(**kwargs):
        calls.append(kwargs)
        raise MlflowException("no such table: datasets")

    calls.clear()
    monkeypatch.setattr(mlflow, "log_inputs", broken)
    with pytest.raises(MlflowException, match="no such table"):
        td.log_datasets(SUMMARY, WHERE)
    assert len(calls) == 1
