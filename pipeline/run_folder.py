"""A run's folder is trusted like a pickle, and what is written there is closed to others.

The engine and Hydra write into `hydra.run.dir` (or a sweep's `hydra.sweep.dir`): Hydra its
`.hydra/*.yaml` (the whole config, secrets included) and `pipeline.log`, the engine its predictors,
finished fits and BEST. Written through a symbolic link, or into another user's folder, these would
land where someone else chose, or be swapped by them before the engine reads them back. So before
Hydra writes anything (a Hydra callback, pipeline.callbacks.RunFolderCallback) the folder is checked
by `lstat` at every level below its nearest existing ancestor: not a symbolic link, this user's (or
root's), writable by no one else; the folders above it must be this user's or root's, or sticky.

Whatever the umask, nothing the engine or Hydra creates is writable by group or others
(`close_umask`), and while Hydra writes its own files (the config, the log) they are this user's
alone (`private_umask`): 0600 files in 0700 folders.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Union

from pipeline.trusted import UntrustedFile, check_owned, make_folders

# What the engine and Hydra write inside a run folder: folders, and files written in place (not renamed)
ENGINE_FOLDERS = (".hydra", "data", "tasks", "trials", "checkpoints", "predictors")
IN_PLACE_FILES = (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "pipeline.log", ".lock",
                  "multirun.yaml")
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def close_umask() -> int:
    """Add group and other write to the umask (the umask 0o000 a user may have becomes 0o022); returns
    the umask before."""
    return _add_to_umask(0o022)


def private_umask() -> int:
    """This user's alone from now on (umask 0o077 added); returns the umask before."""
    return _add_to_umask(0o077)


def _add_to_umask(bits: int) -> int:
    old = os.umask(bits)  # the only way to read the umask is to set it
    os.umask(old | bits)
    return old


def check_run_folder(path: Union[str, Path], key: str) -> None:
    """Refuse (UntrustedFile, naming `key` and the path) a run folder that is a symbolic link, another
    user's, or writable by others, at any level the engine or Hydra writes through; or one whose existing
    parents another user could swap it in."""
    path = Path(os.path.abspath(path))
    try:
        _check_parents(path, key)
        check_owned(path, "the run folder", folder=True, shared=False)
        if not os.path.lexists(path):
            return
        for name in ENGINE_FOLDERS:
            check_owned(path / name, "a folder of the run", folder=True, shared=False)
        for name in IN_PLACE_FILES:
            check_owned(path / name, "a file of the run")
    except UntrustedFile as exc:
        raise UntrustedFile(f"{key}={path}: {exc}") from None


def make_run_folder(path: Path, key: str = "hydra.run.dir") -> None:
    """The run folder checked (check_run_folder), then made where it is missing (0755 whatever the umask)."""
    check_run_folder(path, key)
    make_folders(path)


def _check_parents(path: Path, key: str) -> None:
    """Each existing folder above `path` is this user's or root's and closed to others' writes unless
    sticky; a symbolic link among them counts if this user or root made it (the system's own links)."""
    me = os.geteuid()
    for parent in reversed(path.parents):
        try:
            link, st = os.lstat(parent), os.stat(parent)
        except FileNotFoundError:
            return
        for who in (link.st_uid, st.st_uid):
            if who not in (me, 0):
                raise UntrustedFile(f"{parent}, a folder above it, belongs to uid {who}, not to this user "
                                    f"(uid {me}) or root: its owner could swap the run folder for another; "
                                    "choose a folder of your own")
        mode = stat.S_IMODE(st.st_mode)
        if mode & _OTHERS_WRITE and not mode & stat.S_ISVTX:
            raise UntrustedFile(f"{parent}, a folder above it, is writable by other users (mode {mode:04o}): "
                                f"they could swap the run folder for another; `chmod go-w {parent}`, or "
                                "choose a folder of your own")
