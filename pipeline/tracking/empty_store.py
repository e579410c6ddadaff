"""New SQLite stores start as a copy of an empty store kept in the engine's private cache.

MLflow builds a new SQLite store's schema on first open by replaying its migrations: 1.4 s of CPU on the
2-core box, in each new directory a run logs from. For one MLflow version the store it builds is the
same every time, so the first one is kept, emptied of its default experiment (which MLflow makes again
when it opens a copy, with the copy's own artifact root), and each later new store is a copy: it opens
in 0.04 s. The kept store is an entry of pipeline.private_cache (this user's file alone): one another
user wrote could hand a run's store rows of their choosing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

KIND = "mlflow-store"
SQLITE_HEADER = b"SQLite format 3\x00"


def seed(path: Path) -> bool:
    """Make the new SQLite store `path` a copy of this MLflow version's empty store (built and kept first
    where there is none): whether it did. Nothing is written over a file already at `path`, and a store
    seen half-copied is never left there (the copy is linked into place whole). An in-memory database or
    a path with URI parameters is left to MLflow."""
    if os.path.lexists(path) or path.name == ":memory:" or "?" in path.name:
        return False
    data = empty_store()
    if data is None:
        return False
    partial = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) & ~0o022)  # others may not write, whatever the umask
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(partial, path)  # fails if a store appeared at `path` meanwhile: that one stays
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)


def empty_store() -> Optional[bytes]:
    """This MLflow version's empty store: the kept one, else one built now and kept; None where MLflow
    cannot build one apart (MLflow then builds the store itself, as it would without this)."""
    from pipeline import private_cache

    name = f"empty-{_mlflow_version()}.db"
    kept = private_cache.read_bytes(KIND, name)
    if kept is not None and kept.startswith(SQLITE_HEADER):
        return kept
    try:
        data = _build()
    except Exception as exc:  # noqa: BLE001  (a later MLflow's internals: the store is built in place)
        log.debug("could not build an empty MLflow store apart: %s", exc)
        return None
    private_cache.keep_bytes(KIND, name, data)
    return data


def _mlflow_version() -> str:
    from mlflow.version import VERSION

    return VERSION


def _build() -> bytes:
    """An MLflow SQLite store with its whole schema and no experiment, built in a private scratch folder."""
    import sqlite3
    import tempfile

    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    with tempfile.TemporaryDirectory(prefix="pipeline-store-") as scratch:
        db = Path(scratch) / "empty.db"
        store = SqlAlchemyStore(f"sqlite:///{db}", str(Path(scratch) / "artifacts"))
        store.engine.dispose()
        with contextlib.closing(sqlite3.connect(db)) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for table in ("experiment_tags", "experiments"):
                if table in tables:
                    conn.execute(f"DELETE FROM {table}")  # noqa: S608  (fixed names)
            conn.commit()
        return db.read_bytes()
