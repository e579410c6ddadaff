"""A new SQLite store starts as a copy of the empty store kept in the engine's private cache
(pipeline.tracking.empty_store): MLflow builds no schema for it, it is MLflow's store all the same, and a
kept store that anyone else could have written is never copied."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from pipeline.tracking import empty_store
from pipeline.tracking.store import ensure_experiment
from tests.integration.test_shared_box import CACHE_REFUSED, as_nobody, sticky_shared
from tests.unit.test_trusted import NOBODY, needs_root

ATTACKER_ROOT = "file:///tmp/attacker-artifacts"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("PIPELINE_CACHE_DIR", str(folder))
    return folder


def new_store(root: Path, name: str) -> tuple[str, str, Path]:
    """A store's URI in a new directory under `root`, its experiment made as a run makes it."""
    outputs = root / name / "outputs"
    uri = f"sqlite:///{outputs / 'mlflow.db'}"
    return uri, ensure_experiment(uri, "pipeline", outputs / "mlartifacts"), outputs


def refuse_schema_building(monkeypatch) -> None:
    import mlflow.store.db.utils as db_utils

    def built(*_):
        raise AssertionError("MLflow built a store's schema")

    monkeypatch.setattr(db_utils, "_initialize_tables", built)


def experiments(uri: str) -> dict[str, str]:
    import mlflow

    return {e.name: e.artifact_location for e in mlflow.MlflowClient(uri).search_experiments()}


def test_a_new_store_is_a_copy_of_the_kept_empty_store_and_mlflow_builds_no_schema(cache, tmp_path,
                                                                                   monkeypatch):
    import mlflow

    new_store(tmp_path, "first")  # builds the empty store and keeps it
    kept = cache / empty_store.KIND / f"empty-{mlflow.__version__}.db"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700

    refuse_schema_building(monkeypatch)
    uri, experiment_id, outputs = new_store(tmp_path, "second")
    assert experiments(uri)["pipeline"] == (outputs / "mlartifacts").resolve().as_uri()
    assert "Default" in experiments(uri)  # MLflow's own default experiment, made again on the copy
    client = mlflow.MlflowClient(uri)
    run = client.create_run(experiment_id)
    client.log_metric(run.info.run_id, "test_roc_auc", 0.9)
    client.set_terminated(run.info.run_id)
    assert client.get_run(run.info.run_id).data.metrics == {"test_roc_auc": 0.9}
    assert not stat.S_IMODE((outputs / "mlflow.db").stat().st_mode) & 0o022
    assert [p.name for p in outputs.iterdir() if p.name.endswith(".tmp")] == []


def test_a_store_already_there_is_never_written_over(cache, tmp_path):
    path = tmp_path / "mlflow.db"
    path.write_bytes(b"not a store")
    assert empty_store.seed(path) is False
    assert path.read_bytes() == b"not a store"


def planted_store(tmp_path: Path) -> bytes:
    """An empty store holding the attacker's "pipeline" experiment, whose artifacts go to their folder."""
    db = tmp_path / "planted.db"
    db.write_bytes(empty_store._build())
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO experiments (experiment_id, name, artifact_location, lifecycle_stage, "
                     "workspace) VALUES (7, 'pipeline', ?, 'active', 'default')", (ATTACKER_ROOT,))
    return db.read_bytes()


@needs_root
@pytest.mark.parametrize("how", ["another user's file", "a symbolic link"])
def test_a_kept_store_anyone_else_could_have_written_is_not_copied(cache, tmp_path, caplog, how):
    import mlflow

    kept = cache / empty_store.KIND / f"empty-{mlflow.__version__}.db"
    new_store(tmp_path, "first")
    planted = planted_store(tmp_path)
    if how == "a symbolic link":
        target = tmp_path / "theirs.db"
        target.write_bytes(planted)
        kept.unlink()
        kept.symlink_to(target)
    else:
        kept.write_bytes(planted)
        os.chown(kept, NOBODY, NOBODY)
    uri, _, outputs = new_store(tmp_path, "second")
    assert experiments(uri)["pipeline"] == (outputs / "mlartifacts").resolve().as_uri()
    assert f"not using the cached {empty_store.KIND}" in caplog.text
    assert not kept.is_symlink() and kept.stat().st_uid == os.getuid()  # kept again, this user's


@needs_root
def test_a_cache_folder_another_user_made_is_not_used_for_stores(tmp_path, monkeypatch, caplog):
    """The attacker made the cache's folders in a shared place, open to all, and put their store there."""
    import mlflow

    cache = sticky_shared(tmp_path) / "cache"
    planted = planted_store(tmp_path)
    entry = cache / empty_store.KIND / f"empty-{mlflow.__version__}.db"

    def plant():
        entry.parent.mkdir(mode=0o777, parents=True)
        entry.write_bytes(planted)
        entry.chmod(0o666)

    as_nobody(plant)
    monkeypatch.setenv("PIPELINE_CACHE_DIR", str(cache))
    uri, _, outputs = new_store(tmp_path, "mine")
    assert experiments(uri)["pipeline"] == (outputs / "mlartifacts").resolve().as_uri()
    assert CACHE_REFUSED in caplog.text
    assert entry.stat().st_uid == NOBODY  # left as it was
