"""Files the engine unpickles are read only when no one but this user (or root) could have written them.

Unpickling (and torch.load) runs whatever code the file's writer chose, so every such file the engine
reads back (the workers' data file, the run directory's finished fits, network checkpoints and
predictors, a DDP rank's result) is opened by `open_trusted`, which refuses it unless:

- the name is the file itself, not a symbolic link (O_NOFOLLOW; O_NONBLOCK, so a FIFO planted there
  cannot hang the open) — the folders on the way may be links: what counts is the folder reached;
- by its descriptor (fstat: the file checked is the file read), it is a regular file owned by this
  user or by root, writable by no one else (no group or other write bit); others may read it;
- the folder holding it, opened first and fstat'd (the file is then opened relative to that
  descriptor, so a folder swapped after its check is not followed), is owned by this user or root and
  writable by no one else, unless it has the sticky bit (as /tmp has: no one else may rename or
  remove this user's files there) and the file has a single link (a hard link is how another user
  could place a file of this user's, with content they chose, under a name the engine reads).

Root is trusted because it can replace any file and this user's programs anyway; files owned by root
appear in a user's folders legitimately (a container running as root writing into a mounted folder),
and refusing them would protect nothing.

A file that fails is never read and never silently written over: UntrustedFile names the path and
what is wrong, and the run stops (a planted file means someone else can write where the engine keeps
its results; the user should see that, not have it replaced).

A copy of the package shipped with a logged model looks for the modules it does not hold only in an
engine tree that passes the same checks (`installed_package_folders`).

The engine writes these files with `create_file` (mode 0644 less the umask, never through a symlink)
into folders made by `make_folders` (0755 less the umask), so what it writes passes these checks
under umask 0 too.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path
from typing import BinaryIO, Optional, Union

from pipeline.errors import PipelineError

FILE_MODE = 0o644
FOLDER_MODE = 0o755
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeFile(OSError):
    """A file, folder or socket another user could have written or could be listening on."""


class UntrustedFile(UnsafeFile, PipelineError):
    """A file the engine would unpickle that someone other than this user (or root) could have written."""


def _owner_trusted(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def _refuse(path: Union[str, Path], problem: str, fix: str) -> UntrustedFile:
    return UntrustedFile(
        f"{path} {problem}: the engine refuses to load it, since loading it would run code its writer "
        f"chose; it reads only files that this user or root wrote and no one else can change. {fix}"
    )


def _check_folder(st: os.stat_result, path: Path) -> None:
    mode, folder = stat.S_IMODE(st.st_mode), path.parent
    if not _owner_trusted(st.st_uid):
        raise _refuse(path, f"is in a folder ({folder}) that belongs to uid {st.st_uid}, not to this user "
                      f"(uid {os.geteuid()}) or root", "Copy what you trust into a folder of your own.")
    if mode & _OTHERS_WRITE and not mode & stat.S_ISVTX:
        raise _refuse(path, f"is in a folder ({folder}) writable by other users (mode {mode:04o})",
                      f"If no one else wrote into it, `chmod go-w {folder}`.")


def _check_file(st: os.stat_result, path: Path, folder_shared: bool) -> None:
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "is not a regular file", "Remove it; the engine writes its own files.")
    if not _owner_trusted(st.st_uid):
        raise _refuse(path, f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}) or root",
                      "Remove it, or, if you trust who wrote it, copy it: the copy is yours.")
    if mode & _OTHERS_WRITE:
        raise _refuse(path, f"is writable by other users (mode {mode:04o}; {FILE_MODE:04o} expected)",
                      f"If no one else changed it, `chmod go-w {path}`.")
    if folder_shared and st.st_nlink != 1:
        raise _refuse(path, f"has {st.st_nlink} hard links in a folder other users may write into",
                      "Remove it; the engine writes its own files.")


def _lstat(path: Path) -> Optional[os.stat_result]:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def check_owned(path: Union[str, Path], what: str, *, folder: bool = False, shared: bool = True) -> None:
    """Refuse (UntrustedFile naming `path`, `what` it is and the fix) a `path` that is there and is a
    symbolic link, not a regular file (or folder), another user's (not root's), or writable by group or
    others, unless a folder with the sticky bit (as /tmp: no one else may rename or remove ours there)
    where `shared`.
    A path that is not there passes: the engine makes it, closed to others."""
    path = Path(path)
    st = _lstat(path)
    if st is None:
        return
    mode = stat.S_IMODE(st.st_mode)
    kind = "folder" if folder else "file"
    if stat.S_ISLNK(st.st_mode):
        problem, fix = "is a symbolic link", f"Replace it with a {kind} of your own."
    elif not (stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)):
        problem, fix = f"is not a {kind}", "Remove it, or choose another path."
    elif not _owner_trusted(st.st_uid):
        problem = f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}) or root"
        fix = f"Use a {kind} of your own (another user may have made it to read or change what is kept)."
    elif mode & _OTHERS_WRITE and not (folder and shared and mode & stat.S_ISVTX):
        problem = f"is writable by other users (mode {mode:04o})"
        fix = f"If no one else changed it, `chmod go-w {path}`."
    else:
        return
    raise UntrustedFile(f"{path} ({what}) {problem}: the engine refuses to use it, since another user could "
                        f"change what it reads there or run code as you. {fix}")


def check_tree(root: Union[str, Path], what: str) -> None:
    """Refuse (UntrustedFile) a folder tree the engine would load code or objects from unless every
    folder and file in it, walked without following a symbolic link at any level (O_NOFOLLOW, checked
    by descriptor), is this user's or root's and writable by no one else."""
    root = Path(root)

    def refuse(path: Path, problem: str) -> UntrustedFile:
        return UntrustedFile(f"{path} ({what}) {problem}: the engine refuses to load from it, since "
                             "another user could run code as you through it. Use a copy of your own, closed "
                             "to others.")

    def walk(fd: int, path: Path) -> None:
        st = os.fstat(fd)
        if not _owner_trusted(st.st_uid):
            raise refuse(path, f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}) or root")
        if stat.S_IMODE(st.st_mode) & _OTHERS_WRITE:
            raise refuse(path, f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})")
        if not stat.S_ISDIR(st.st_mode):
            if not stat.S_ISREG(st.st_mode):
                raise refuse(path, "is not a regular file")
            return
        for name in os.listdir(fd):
            try:
                child = os.open(name, _READ_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise refuse(path / name, "is a symbolic link") from None
                raise
            try:
                walk(child, path / name)
            finally:
                os.close(child)

    try:
        top = os.open(root, _READ_FLAGS | os.O_DIRECTORY)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(root):
            raise refuse(root, "is a symbolic link") from None
        raise
    try:
        walk(top, root)
    finally:
        os.close(top)


def open_trusted(path: Union[str, Path]) -> BinaryIO:
    """`path` opened for reading after the checks of this module's docstring; UntrustedFile if it fails
    them, FileNotFoundError (or another OSError) if it or its folder is not there."""
    path = Path(path)
    folder_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_trusted_at(folder_fd, path.name, path)
    finally:
        os.close(folder_fd)


def open_trusted_at(folder_fd: int, name: str, path: Path) -> BinaryIO:
    """open_trusted for the file `name` of the open folder `folder_fd` (`path` names it in messages)."""
    folder = os.fstat(folder_fd)
    _check_folder(folder, path)
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=folder_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(path, "is a symbolic link",
                          "Remove the link; the engine reads only files, never links.") from None
        raise
    try:
        _check_file(os.fstat(fd), path, bool(stat.S_IMODE(folder.st_mode) & _OTHERS_WRITE))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def create_file(path: Union[str, Path]) -> BinaryIO:
    """`path` created (or emptied) for writing, never through a symlink, with mode 0644 less the umask:
    never writable by group or others, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & _OTHERS_WRITE:  # a file that was there keeps its mode through O_TRUNC
            os.fchmod(fd, mode & ~_OTHERS_WRITE)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb")


def make_folders(path: Union[str, Path]) -> None:
    """`path` and the folders missing above it, each made 0755 whatever the umask (os.makedirs gives
    the folders above the last only the umask's mode)."""
    missing = []
    path = Path(path)
    while not path.is_dir() and path != path.parent:
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, FOLDER_MODE)
        except FileExistsError:
            if not folder.is_dir():
                raise


def copy_trusted(source: Union[str, Path], target: Union[str, Path]) -> None:
    """Copy `source`, checked by open_trusted (a copy must not make another user's file this user's),
    into a new file `target`, whose mode is never wider than the source's (nor than create_file's)."""
    with open_trusted(source) as src:
        _copy_open(src, target)


def _copy_open(src: BinaryIO, target: Union[str, Path]) -> None:
    mode = stat.S_IMODE(os.fstat(src.fileno()).st_mode) & FILE_MODE
    with create_file(target) as dst:
        os.fchmod(dst.fileno(), mode)
        shutil.copyfileobj(src, dst)
        dst.flush()
        os.fsync(dst.fileno())


def copy_tree_trusted(source: Union[str, Path], target: Union[str, Path]) -> None:
    """Copy the folder `source` into the new folder `target`, walked by descriptors without following a
    symbolic link at any level (O_NOFOLLOW): each folder this user's or root's and closed to others'
    writes, each file checked as open_trusted checks it; no copy's mode is wider than its source's."""
    source = Path(source)
    try:
        fd = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(source):
            refusal = _refuse(source, "is a symbolic link", "Remove the link; the engine copies only folders.")
            raise refusal from None
        raise
    try:
        _copy_tree_at(fd, source, Path(target))
    finally:
        os.close(fd)


def _copy_tree_at(fd: int, source: Path, target: Path) -> None:
    st = os.fstat(fd)
    _check_folder(st, source / "(its files)")
    os.mkdir(target, (stat.S_IMODE(st.st_mode) & FOLDER_MODE) | stat.S_IRWXU)  # group, others: never wider
    for entry in os.scandir(fd):
        if entry.is_dir(follow_symlinks=False):
            child = os.open(entry.name, _READ_FLAGS | os.O_DIRECTORY, dir_fd=fd)
            try:
                _copy_tree_at(child, source / entry.name, target / entry.name)
            finally:
                os.close(child)
        else:  # a symbolic link, to a file or a folder, is refused by the check
            with open_trusted_at(fd, entry.name, source / entry.name) as src:
                _copy_open(src, target / entry.name)


_CHECKED_TREES: dict[str, bool] = {}  # an engine folder found on sys.path -> whether it passed check_tree


def installed_package_folders(package: str, shipped: list[str]) -> list[str]:
    """Where an installed engine holds `package` (`pipeline` or a package below it), for a copy of the
    package shipped with a logged model (pipeline.tracking.shipped_code) whose `__path__` is `shipped`:
    the folder of that name under each absolute `sys.path` entry, never the working directory's (anyone's
    where it is a shared one), with an `__init__.py`, and only where the whole engine tree holding it
    passes `check_tree`; a tree that fails is named in a warning and left out."""
    import sys
    import warnings

    parts = package.split(".")
    found = []
    for entry in sys.path:
        if not entry or not os.path.isabs(entry):
            continue
        top, folder = os.path.join(entry, parts[0]), os.path.join(entry, *parts)
        if folder in shipped or folder in found or not os.path.isfile(os.path.join(folder, "__init__.py")):
            continue
        if top not in _CHECKED_TREES:
            try:
                check_tree(top, "an engine found on the path, for the modules a logged model does not ship")
                _CHECKED_TREES[top] = True
            except (UntrustedFile, OSError) as exc:
                _CHECKED_TREES[top] = False
                warnings.warn(str(exc), stacklevel=2)
        if _CHECKED_TREES[top]:
            found.append(folder)
    return found
