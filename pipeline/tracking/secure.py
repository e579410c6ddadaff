"""Files and sockets whose writer is checked before anything read from them is trusted.

A tracker host's file holds an authentication key and the address of a socket whose answers are
unpickled: whoever wrote the file, or listens on the socket, could run code in every run that reads
it. So a host file is opened without following a symlink and checked, by its descriptor, to be a
regular file owned by this user that no one else can read or write; a folder is checked the same
way once and then used through its descriptor (a path swapped for a symlink later changes
nothing); and a socket's peer must be a process of this user (SO_PEERCRED) before a byte it sends
is read.
"""

from __future__ import annotations

import errno
import os
import secrets
import socket
import stat
import struct
from pathlib import Path
from typing import Optional, Union

from pipeline.trusted import UnsafeFile

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC


def check_private(fd: int, path: Union[str, Path], *, folder: bool = False) -> None:
    """Raise UnsafeFile unless the open file `fd` is a regular file (or a folder) owned by this user,
    with no permission for its group or others."""
    st = os.fstat(fd)
    kind = "folder" if folder else "file"
    if not (stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)):
        raise UnsafeFile(f"{path} is not a {kind}")
    if st.st_uid != os.getuid():
        raise UnsafeFile(f"{path} belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise UnsafeFile(f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):04o}; "
                         f"{(PRIVATE_DIR_MODE if folder else PRIVATE_FILE_MODE):04o} expected)")


def open_private_dir(path: Path, create: bool = False) -> int:
    """A descriptor of the folder `path` (made 0700 when `create` and missing), opened without following
    a symlink and checked by check_private; UnsafeFile or OSError otherwise."""
    if create:
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
        except FileExistsError:
            pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _FLAGS)
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafeFile(f"{path} is a symbolic link") from None
        raise exc
    try:
        check_private(fd, path, folder=True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_private(name: Union[str, Path], dir_fd: Optional[int] = None) -> bytes:
    """The bytes of a file this user wrote for itself alone (see check_private), opened without
    following a symlink; UnsafeFile if someone else could have written it, OSError if it is not there."""
    try:
        fd = os.open(name, os.O_RDONLY | _FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the name is a symbolic link
            raise UnsafeFile(f"{name} is a symbolic link") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        check_private(fh.fileno(), name)
        return fh.read()


def write_private(name: str, data: bytes, dir_fd: int) -> None:
    """Write `data` to `name` in the folder `dir_fd`, readable by this user only, whole or not at all:
    a new file (never one that exists, never through a symlink), then a rename over `name`."""
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FLAGS, PRIVATE_FILE_MODE, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def open_private_file(name: str, flags: int, dir_fd: int) -> int:
    """A descriptor of `name` in the folder `dir_fd`, created 0600 if need be (os.O_CREAT in `flags`),
    never through a symlink, and checked by check_private."""
    fd = os.open(name, flags | _FLAGS, PRIVATE_FILE_MODE, dir_fd=dir_fd)
    try:
        check_private(fd, name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def dir_path(dir_fd: int, name: str) -> str:
    """A path to `name` inside the folder `dir_fd` that resolves through the descriptor (Linux's
    /proc/self/fd), so a folder renamed or replaced by a symlink since it was checked is not followed;
    a socket's bind and connect take only paths."""
    return f"/proc/self/fd/{dir_fd}/{name}"


def has_fd_paths() -> bool:
    return os.path.isdir("/proc/self/fd")


def peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end of a connected Unix socket."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def check_peer(fd: int, address: str) -> None:
    """Raise UnsafeFile unless the Unix socket `fd` is connected to a process of this user."""
    sock = socket.socket(fileno=os.dup(fd))
    try:
        uid = peer_uid(sock)
    finally:
        sock.close()
    if uid != os.getuid():
        raise UnsafeFile(f"the socket {address} is served by uid {uid}, not by this user (uid {os.getuid()})")
