"""The run directory's durable state: finished task results keyed by hash, and the run's status.

Every finished fold is written atomically as soon as it arrives, so an interrupted or failed run
keeps what it finished; a resumed run (same directory, or resume=true) skips those tasks.
"""

from __future__ import annotations

import copy
import errno
import json
import logging
import os
import pickle
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional

from pipeline.errors import ConfigError
from pipeline.trusted import (
    FILE_MODE, UnsafeFile, UntrustedFile, check_owned, copy_trusted, copy_tree_trusted, create_file,
    make_folders, open_trusted,
)

if TYPE_CHECKING:
    from pipeline.config import Resume

log = logging.getLogger(__name__)

STATE_FILE = "run_state.json"


def temporary_name(path: Path) -> Path:
    """Where `path` is written before its rename; a killed run's leftovers match _TEMPORARY."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def atomic_write_bytes(path: Path, data: bytes, durable: bool = True) -> None:
    """Write to a temporary name beside `path`, then rename: a reader never sees half a file. The file
    is never group or other writable (pipeline.trusted.create_file), nor is a folder made for it.
    durable: synced to the disk before the rename (a machine that loses power keeps it whole); without,
    the operating system writes it when it will (a file that can be made again)."""
    make_folders(path.parent)
    tmp = temporary_name(path)
    with create_file(tmp) as fh:
        fh.write(data)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def atomic_copy_file(source: Path, target: Path) -> None:
    """Copy `source` (checked: pipeline.trusted.copy_trusted) to a temporary name beside `target`, then
    rename: a crash never leaves half a file."""
    tmp = temporary_name(target)
    try:
        copy_trusted(source, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_copy_tree(source: Path, target: Path) -> None:
    """Copy the folder `source`, walked without following links and every file checked
    (pipeline.trusted.copy_tree_trusted), into a temporary folder beside `target`, then rename it: all
    of it or nothing."""
    tmp = temporary_name(target)
    shutil.rmtree(tmp, ignore_errors=True)
    make_folders(target.parent)
    try:
        copy_tree_trusted(source, tmp)
        os.rename(tmp, target)
    except OSError:
        if not target.exists():  # another process may have put it there first; that copy is whole too
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class RunDirectoryLock:
    """Holds run_dir/.lock for the run's lifetime: two live runs never write into one directory.

    The lock is the operating system's (flock), so it is released when the process dies however
    it dies, and a resumed run takes it over at once.
    """

    def __init__(self, run_dir: Path):
        self.path = run_dir / ".lock"
        self._fh = None

    def __enter__(self) -> "RunDirectoryLock":
        import fcntl

        make_folders(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        fh = os.fdopen(fd, "r+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise ConfigError(
                f"hydra.run.dir={self.path.parent}: another run ({holder}) is writing into this directory; "
                "wait for it, or give this run its own hydra.run.dir"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}")
        fh.flush()
        self._fh = fh
        _remove_temporaries(self.path.parent)
        return self

    def __exit__(self, *exc) -> None:
        if self._fh is not None:
            self._fh.close()  # closing releases the flock
            self._fh = None

    @staticmethod
    def is_held(run_dir: Path) -> bool:
        """Whether a live run holds run_dir's lock now."""
        import fcntl

        try:
            fh = open(run_dir / ".lock", "r")
        except OSError:
            return False
        with fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
            return False


_TEMPORARY = re.compile(r"^\..+\.\d+\.tmp$")  # temporary_name's pattern


def _remove_temporaries(run_dir: Path) -> None:
    """Temporaries a killed run left in the folders the engine writes (never read: only a rename
    publishes a file). Only those folders: hydra.run.dir may name a directory shared with others."""
    folders = [run_dir, *(run_dir / f for f in ("data", "tasks", "trials", "checkpoints", "predictors"))]
    folders += [p for p in (run_dir / "checkpoints").glob("*") if p.is_dir()]
    for folder in folders:
        for path in folder.glob(".*.tmp"):
            if not _TEMPORARY.match(path.name):
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


@dataclass(frozen=True)
class Reused:
    """A finished result a run took instead of fitting: the run directory that made it, and when."""

    run_dir: Path
    finished: float  # the result file's modification time


def reuse_summary(reused: list[Reused], total: int, run_dir: Path) -> Optional[str]:
    """What a run says of the fits it reused: how many of its `total`, from where and from when."""
    if not reused:
        return None
    import datetime

    when = sorted(r.finished for r in reused)
    stamp = lambda t: datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")  # noqa: E731
    span = stamp(when[0]) if stamp(when[0]) == stamp(when[-1]) else f"{stamp(when[0])} to {stamp(when[-1])}"
    places = sorted({"this run directory" if r.run_dir.resolve() == run_dir.resolve() else str(r.run_dir)
                     for r in reused})
    return (f"reused {len(reused)} of {total} fit(s) finished earlier in {', '.join(places)} ({span}); "
            "their fit_s are the seconds those runs took (the leaderboard's reused column counts them)")


class ResultStore:
    """tasks/<key>.pkl in the run directory; optionally read-through from earlier run directories.

    Every result is unpickled only after pipeline.trusted's checks: one that fails them (a symlink,
    another user's file, a file or folder others may write) stops the run with UntrustedFile rather
    than being fitted again over it, so that whoever can write into the run directory is noticed.
    """

    def __init__(self, run_dir: Path, sources: Iterable[Path] = ()):
        self.dir = run_dir / "tasks"
        make_folders(self.dir)
        self.sources = [Path(s) / "tasks" for s in sources if Path(s).resolve() != run_dir.resolve()]
        self.reused: list[Reused] = []  # the finished results get() handed out, in order
        self._unwritten: dict[str, tuple] = {}  # put(later=True), not yet written: flush(); (result, bytes)

    def get(self, key: str) -> Optional[Any]:
        """The finished result stored under `key` (here, or in an earlier run directory, copied here
        first), noted in `reused`; None if there is none. UntrustedFile if it fails the checks. A result
        put in this run and not yet written is handed out as a copy, not noted."""
        if key in self._unwritten:
            return copy.copy(self._unwritten[key][0])
        path = self.dir / f"{key}.pkl"
        origin = path
        if not os.path.lexists(path):  # a dangling symlink is there, and refused below
            for source in self.sources:
                candidate = source / f"{key}.pkl"
                if os.path.lexists(candidate):
                    finished = os.lstat(candidate).st_mtime
                    atomic_copy_file(candidate, path)
                    origin = candidate
                    break
            else:
                return None
        try:
            with open_trusted(path) as fh:
                if origin == path:
                    finished = os.fstat(fh.fileno()).st_mtime
                result = pickle.load(fh)
        except UnsafeFile:
            raise
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            log.warning("ignoring the unreadable cached result %s (%s)", path.name, exc)
            return None
        self.reused.append(Reused(origin.parent.parent, finished))
        return result

    def put(self, key: str, result: Any, later: bool = False, pickled: Optional[bytes] = None) -> None:
        """Write `result` under `key`; `later`: at the next flush() (a scheduler starts the next fits first,
        so that a worker does not wait on the driver's pickling and disk; a run killed before the flush
        fits those again when resumed, as one killed during their fits would). `pickled`: `result` as the
        worker that made it pickled it, written as it is (pickling a fitted booster again cost the driver
        about 11 ms a fit, on CPUs the fits share).

        Results are not synced to the disk one by one: a machine that loses power may leave one empty or
        cut, which get() reads as unreadable, and the fit runs again."""
        self._unwritten[key] = (result, pickled)
        if not later:
            self.flush()

    def flush(self) -> None:
        """Write the results put for later."""
        while self._unwritten:
            key = next(iter(self._unwritten))
            result, data = self._unwritten[key]
            if data is None:
                data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
            atomic_write_bytes(self.dir / f"{key}.pkl", data, durable=False)
            del self._unwritten[key]

    def lighten(self, key: str, result: Any) -> None:
        """Replace the result stored under `key` by `result` (the same fit without its model:
        graph.retention), where this run holds one; an earlier run's folder is left as it is."""
        if key in self._unwritten:
            self._unwritten[key] = (result, None)
        elif os.path.lexists(self.dir / f"{key}.pkl"):
            data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
            atomic_write_bytes(self.dir / f"{key}.pkl", data, durable=False)

    def checkpoint_dir(self, key: str) -> Path:
        """The per-task checkpoint folder, seeded from an earlier run's checkpoint when resuming."""
        target = self.dir.parent / "checkpoints" / key
        if not target.exists():
            for source in self.sources:
                candidate = source.parent / "checkpoints" / key
                if os.path.lexists(candidate):  # a symbolic link is there, and refused by the copy
                    atomic_copy_tree(candidate, target)
                    break
        return target

    def __len__(self) -> int:
        return len(list(self.dir.glob("*.pkl")))


def write_state(run_dir: Path, **fields) -> None:
    path = run_dir / STATE_FILE
    state = read_state(run_dir) or {}
    state.update(fields, updated=time.time())
    atomic_write_bytes(path, json.dumps(state, indent=2).encode())


def read_state(run_dir: Path) -> Optional[dict]:
    try:
        return read_json(run_dir / STATE_FILE)
    except (OSError, ValueError):
        return None


def read_json(path: Path):
    """The JSON in `path`, read as `read_regular` reads it."""
    return json.loads(read_regular(path))


def read_regular(path: Path) -> bytes:
    """The bytes of `path`, opened without following a symbolic link and without blocking (a FIFO planted
    there cannot hang the run); UntrustedFile unless it is a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedFile(f"{path} is a symbolic link: the engine reads its own files, never links; "
                                "remove it") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UntrustedFile(f"{path} is not a regular file (a FIFO, a device or a socket): the engine "
                                "reads only the files it wrote; remove it")
        os.set_blocking(fd, True)
        return fh.read()


def check_run_source(directory: Path, key: str) -> None:
    """A run folder whose results this run reuses (resume): it and the folders read from it are not
    symbolic links, this user's (or root's) and closed to others' writes (pipeline.trusted.check_owned)."""
    try:
        check_owned(directory, "a run folder to resume from", folder=True, shared=False)
        for name in ("tasks", "trials", "checkpoints"):
            check_owned(directory / name, "a folder of the run to resume from", folder=True, shared=False)
    except UntrustedFile as exc:
        raise UntrustedFile(f"{key}: {exc}") from None


def resume_sources(resume: Resume, run_dir: Path, outputs_root: Path) -> list[Path]:
    """The earlier run directories whose finished tasks this run may reuse.

    The run directory itself always counts (re-running with the same hydra.run.dir). resume=true
    adds the newest unfinished run under outputs/ that no live run holds; a path adds that directory.
    """
    if not resume:
        return []
    if resume.newest:
        candidates = []
        for state_file in outputs_root.glob(f"**/{STATE_FILE}"):
            directory = state_file.parent
            state = read_state(directory) or {}
            if directory.resolve() == run_dir.resolve() or state.get("status") == "FINISHED":
                continue
            if RunDirectoryLock.is_held(directory):  # its tasks are still being written
                log.warning("resume=true: skipping %s: a live run holds it", directory)
                continue
            candidates.append((state_file.stat().st_mtime, directory))
        if not candidates:
            log.warning("resume=true: no unfinished run under %s; starting afresh", outputs_root)
            return []
        newest = max(candidates)[1]
        check_run_source(newest, "resume=true")
        log.info("resume=true: reusing the finished tasks of %s", newest)
        return [newest]
    path = Path(resume.directory).expanduser()
    check_run_source(path, f"resume={resume.directory!r}")
    if not (path / "tasks").is_dir():
        raise ConfigError(f"resume={resume.directory!r}: not a run directory (it has no tasks/ folder)")
    return [path]


def prior_trials(directories: list[Path]) -> dict:
    """Trials recorded in these run directories, by name; a later directory's win."""
    prior = {}
    for directory in directories:
        prior.update(read_trials(directory / "trials"))
    return prior


def read_trials(directory: Path) -> dict:
    """Model -> {trial: parameters} recorded in `directory`: each `<model>.json`, and the trials its
    `<model>.jsonl` appended since (a line torn by a crash is skipped)."""
    out: dict[str, dict] = {}
    for path in sorted(directory.glob("*.json")):
        out[path.stem] = read_json(path)
    for path in sorted(directory.glob("*.jsonl")):
        mine = out.setdefault(path.stem, {})
        for line in read_regular(path).splitlines():
            try:
                mine.update(json.loads(line))
            except ValueError:
                continue
    return out
