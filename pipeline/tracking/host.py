"""A shared tracker host: one process that serves the runs of many, reached the same way by each.

A host listens on a Unix socket with an authentication key and says where in a host file (JSON:
`address`, `authkey`, `pid`, and what its kind adds). A run reads the file (pipeline.tracking.secure:
this user's, no one else's), dials the socket, checks that the process listening is this user's,
and sends its tracker: the host serves it in a thread (pipeline.tracking.protocol.serve_run), at
most MAX_RUNS at once. A run that finds no host, or a full one, logs through a process of its own.
The sweep's host (pipeline.tracking.sweep_host) and the service kept between runs
(pipeline.tracking.service) are both this.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from multiprocessing.connection import Connection, Listener, answer_challenge, deliver_challenge
from typing import Optional

from pipeline.tracking import secure
from pipeline.tracking.protocol import serve_run

log = logging.getLogger(__name__)

MAX_RUNS = 4  # runs served at once; the run that would be one more logs through a process of its own
RETIRE = "retire"  # sent in place of a run's tracker: stop taking runs
DIAL_TIMEOUT_S = 10.0  # a host that accepts and then says nothing is not waited for longer


def listen(address: str) -> tuple[Listener, bytes]:
    """A listener on the Unix socket `address` (its folder must be private), and its key."""
    authkey = os.urandom(32)
    return Listener(address, family="AF_UNIX", authkey=authkey), authkey


def read_host_file(name, dir_fd: Optional[int] = None, shown: Optional[str] = None) -> Optional[dict]:
    """The host file `name` (in the folder `dir_fd`, if given; `shown` is its path for messages), or
    None: missing, unreadable, not a host file, or not written by this user alone (a warning says so:
    someone may have tried to hand this run a socket of theirs)."""
    try:
        found = json.loads(secure.read_private(name, dir_fd=dir_fd))
    except secure.UnsafeFile as exc:
        log.warning("ignoring the tracker host file %s: %s", shown or name, exc)
        return None
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or not isinstance(found.get("address"), str):
        return None
    return found


def write_host_file(name: str, info: dict, dir_fd: int) -> None:
    secure.write_private(name, json.dumps(info).encode(), dir_fd)


def dial(address: str, authkey: bytes) -> tuple[Optional[Connection], bool]:
    """Connect to the host at `address`: (the connection, if the host is this user's process and
    will serve one run on it, else None; whether a host was reached at all). Nothing the host sends
    is read before its user is checked."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(DIAL_TIMEOUT_S)
            sock.connect(address)
            sock.settimeout(None)
            secure.check_peer(sock.fileno(), address)
            conn = Connection(sock.detach())
    except secure.UnsafeFile as exc:
        log.warning("not logging through the tracker host at %s: %s", address, exc)
        return None, False
    except OSError:  # it has exited: its file is stale
        return None, False
    try:
        answer_challenge(conn, authkey)
        deliver_challenge(conn, authkey)
        answer = conn.recv() if conn.poll(DIAL_TIMEOUT_S) else None
    except Exception:  # noqa: BLE001  (a wrong key, a host that went away mid-handshake)
        answer = None
    if answer != "ok":  # "busy": it serves MAX_RUNS runs
        conn.close()
        return None, True
    return conn, True


def dial_file(info: dict) -> tuple[Optional[Connection], bool]:
    """dial() the host a host file describes."""
    try:
        authkey = bytes.fromhex(info["authkey"])
    except (KeyError, TypeError, ValueError):
        return None, False
    return dial(info["address"], authkey)


def retire(info: dict) -> bool:
    """Ask the host a host file describes to take no more runs and exit once its runs end."""
    conn, _ = dial_file(info)
    if conn is None:  # it has exited already, or it serves MAX_RUNS runs (a service then idles out)
        return False
    try:
        conn.send(RETIRE)
    except OSError:
        return False
    finally:
        conn.close()
    return True


class Host:
    """Accepts runs' connections and serves each in a thread, at most MAX_RUNS at once."""

    def __init__(self, listener: Listener):
        self._listener = listener
        self._lock = threading.Lock()
        self._serving: set[threading.Thread] = set()
        self._stopped = False
        self._idle_since: Optional[float] = time.monotonic()  # None while a run is served
        self.retired = threading.Event()  # a peer sent RETIRE

    def idle_s(self) -> float:
        """Seconds since the last run ended (or since the start), 0 while one is served."""
        with self._lock:
            return 0.0 if self._idle_since is None else time.monotonic() - self._idle_since

    def start(self) -> None:
        threading.Thread(target=self._accept_all, name="accept", daemon=True).start()

    def _accept_all(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except Exception:  # noqa: BLE001  (closed by stop(), or a peer that failed to authenticate)
                if self._stopped:
                    return
                continue
            try:
                secure.check_peer(conn.fileno(), "the host's socket")
            except (secure.UnsafeFile, OSError) as exc:
                log.warning("refused a connection: %s", exc)
                conn.close()
                continue
            with self._lock:
                full = self._stopped or len(self._serving) >= MAX_RUNS
                if not full:  # started here, under the lock: stop() joins only started threads
                    thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
                    self._serving.add(thread)
                    self._idle_since = None
                    thread.start()
            if full:
                try:
                    conn.send("busy")
                except OSError:
                    pass
                conn.close()

    def _serve(self, conn) -> None:
        try:
            conn.send("ok")
            tracker = conn.recv()
            if tracker == RETIRE:
                self.retired.set()
            else:
                serve_run(conn, tracker)
        except (EOFError, OSError):
            pass
        finally:
            conn.close()
            with self._lock:
                self._serving.discard(threading.current_thread())
                if not self._serving:
                    self._idle_since = time.monotonic()

    def stop(self, wait_s: float) -> None:
        """Take no more runs, and wait for the runs being served to end (at most `wait_s` each)."""
        with self._lock:
            self._stopped = True
            serving = list(self._serving)
        try:
            self._listener.close()
        except OSError:
            pass
        for thread in serving:
            thread.join(wait_s)
