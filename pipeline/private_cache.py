"""The engine's private cache: answers it keeps between runs for this user alone (library answers,
learnt run tails, an empty MLflow store).

Each kind of answer has a folder under `folder()`, each level this user's alone (0700, made so if
missing; pipeline.tracking.secure), and each entry is a file this user wrote for itself (0600, never
read through a symbolic link): an answer another user could write would let a misspelt parameter pass
the checks or hand a run rows of their choosing. A folder of this user's that others may only read is
closed (0700); one another user owns or may write into is not used (warned once), and the answers are
worked out again each time.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

_refused: set[str] = set()  # cache folders already warned about


def folder() -> Path:
    """$PIPELINE_CACHE_DIR, else $XDG_CACHE_HOME (or ~/.cache)/tabular-pipeline."""
    if os.environ.get("PIPELINE_CACHE_DIR"):
        return Path(os.environ["PIPELINE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tabular-pipeline"


def _kind_folder(kind: str) -> Optional[int]:
    """A descriptor of folder()/kind, each level checked as the module says; None (warned once) if
    either is not this user's alone."""
    from pipeline.tracking.secure import dir_path, open_private_dir
    from pipeline.trusted import make_folders

    root = folder()
    try:
        make_folders(root.parent)
        fd = _private_folder(root, open_private_dir)
        try:
            return _private_folder(Path(dir_path(fd, kind)), open_private_dir)
        finally:
            os.close(fd)
    except OSError as exc:
        if str(root) not in _refused:
            _refused.add(str(root))
            log.warning("the engine's private cache (library answers, learnt run tails, an empty MLflow "
                        "store) is not used: %s; libraries are asked each time, time_limit_s learns no "
                        "run tails and new MLflow stores are built from scratch; point PIPELINE_CACHE_DIR "
                        "at a folder of your own that no one else may write into", exc)
        return None


def _private_folder(path: Path, open_private_dir) -> int:
    try:
        return open_private_dir(path, create=True)
    except OSError:
        st = os.lstat(path)  # this user's own folder from before, others only reading: closed now
        if not (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022):
            raise
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_uid == os.getuid():
                os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
        return open_private_dir(path)


def read_bytes(kind: str, name: str) -> Optional[bytes]:
    """The entry `name` of `kind`, if this user alone wrote it (pipeline.tracking.secure.read_private);
    None if it is missing or anyone else could have written it (a warning says which)."""
    from pipeline.tracking.secure import read_private
    from pipeline.trusted import UnsafeFile

    fd = _kind_folder(kind)
    if fd is None:
        return None
    try:
        return read_private(name, dir_fd=fd)
    except UnsafeFile as exc:
        log.warning("not using the cached %s %s: %s", kind, name, exc)
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def keep_bytes(kind: str, name: str, data: bytes) -> None:
    """Keep `data` as the entry `name` of `kind`, readable by this user alone, written whole."""
    from pipeline.tracking.secure import write_private

    fd = _kind_folder(kind)
    if fd is None:
        return
    try:
        write_private(name, data, fd)
    except OSError as exc:
        log.debug("could not keep %s in %s (%s)", name, folder() / kind, exc)
    finally:
        os.close(fd)


def read_json(kind: str, name: str) -> Optional[dict]:
    data = read_bytes(kind, name)
    try:
        return json.loads(data) if data is not None else None
    except ValueError:
        return None


def keep_json(kind: str, name: str, answer: dict) -> None:
    keep_bytes(kind, name, json.dumps(answer).encode())
