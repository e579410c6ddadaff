"""The one pool of long-lived worker processes behind the local executor and the GPU launcher.

A worker is bound for life to the environment it started with (CUDA_VISIBLE_DEVICES first of
all): work for an environment goes to an idle worker started with exactly that environment, or to a
fresh one, so no work ever runs where another device set is visible. A worker that dies (SIGKILL, a segfault, the OOM killer) is reported as `Died`
instead of hanging its caller. `stop` is the one stop escalation: ask, SIGTERM, SIGKILL.
"""

from __future__ import annotations

import itertools
import os
import pickle
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_ready
from typing import Any, Callable, Optional

from pipeline.executors.worker import environment, send

_ids = itertools.count()


@dataclass(eq=False)
class Worker:
    """One worker process and the driver's end of its pipe."""

    key: tuple  # the environment it started with, as a hashable value
    process: Any
    conn: Any
    detached: bool
    busy_since: Optional[float] = None
    id: int = field(default_factory=lambda: next(_ids))
    answer_bytes: Optional[bytes] = None  # its last answer as it came, pickled: a store writes them as they are

    def signal(self, signum: int) -> None:
        """Send `signum` to the worker, and to its process group when it has its own (a fit's DDP ranks)."""
        if self.detached:
            try:
                os.killpg(self.process.pid, signum)
                return
            except (ProcessLookupError, PermissionError):  # not yet in a group of its own
                pass
        try:
            os.kill(self.process.pid, signum)
        except ProcessLookupError:
            pass


@dataclass(frozen=True)
class Died:
    """A worker ended without an answer to its message."""

    exitcode: Optional[int]

    @property
    def reason(self) -> str:
        code = self.exitcode
        if code is not None and code < 0:
            return f"killed by signal {signal_name(-code)}"
        return f"exited with code {code}"


@dataclass(frozen=True)
class Unreadable:
    """A worker answered, but its answer could not be unpickled."""

    error: BaseException


class WorkerPool:
    """Worker processes from one multiprocessing start method, each serving `serve` (see worker.py).

    detach: workers leave the driver's process group, ignore Ctrl-C and die with the driver (the
    local executor's fits); otherwise a stop signal reaches them as it reaches the driver (sweep jobs).
    max_idle: idle workers kept for reuse beyond this number are stopped, the oldest first.
    """

    def __init__(self, method: str, serve: Callable[[Any], Any], *, detach: bool, preload: tuple[str, ...] = (),
                 max_idle: int = 8, name: str = "worker"):
        import multiprocessing

        self.ctx = multiprocessing.get_context(method)
        if method == "forkserver":
            self.ctx.set_forkserver_preload(["pipeline.executors.worker", *preload])
        self.serve, self.detach, self.preload = serve, detach, tuple(preload)
        self.max_idle, self.name = max_idle, name
        self.idle: list[Worker] = []
        self.busy: dict[int, Worker] = {}

    def spawn(self, env: dict[str, Optional[str]]) -> Worker:
        """Start a worker with `env` (set before its first import); it stays idle until used."""
        from pipeline.executors.worker import worker_main

        parent, child = self.ctx.Pipe()
        process = self.ctx.Process(target=worker_main, args=(child, env, self.serve, self.detach, self.preload),
                                   name=f"{self.name}-{len(self.idle) + len(self.busy)}")
        if self.ctx.get_start_method() == "spawn":
            with environment(env):  # a spawned interpreter has it from its first instruction
                process.start()
        else:  # forked from the server: the worker sets it before it imports anything else
            process.start()
        child.close()
        worker = Worker(_key(env), process, parent, self.detach)
        self.idle.append(worker)
        return worker

    def submit(self, env: dict[str, Optional[str]], message: Any) -> Worker:
        """Send `message` to an idle worker started with `env` (a fresh one when none is); it is busy
        until wait() reports it."""
        for dead in [w for w in self.idle if not w.process.is_alive()]:  # died while idle (the OOM killer)
            self.idle.remove(dead)
            dead.conn.close()
        key = _key(env)
        worker = next((w for w in self.idle if w.key == key), None)
        if worker is None:
            worker = self.spawn(env)
        self.idle.remove(worker)
        self.busy[worker.id] = worker
        worker.busy_since = time.monotonic()
        try:
            send(worker.conn, message)
        except (BrokenPipeError, OSError):
            pass  # the worker died: wait() reports it through its sentinel
        return worker

    def wait(self, workers: list[Worker], timeout: Optional[float] = None) -> list[tuple[Worker, Any]]:
        """The busy workers of `workers` that answered or died, with the answer, `Died` or `Unreadable`.

        A worker that answered is idle again (kept for the next message); one that died is gone."""
        waitables = {}
        for w in workers:
            waitables[w.conn] = w
            waitables[w.process.sentinel] = w
        ready = wait_ready(list(waitables), timeout)
        out, seen = [], set()
        for obj in ready:
            w = waitables[obj]
            if w.id in seen:
                continue
            seen.add(w.id)
            out.append((w, self._answer(w)))
        return out

    def _answer(self, w: Worker) -> Any:
        del self.busy[w.id]
        w.busy_since = None
        try:
            if w.conn.poll():  # True on data and on end-of-file
                w.answer_bytes = None
                data = w.conn.recv_bytes()
                answer = pickle.loads(data)  # what Connection.recv does, the bytes kept
                w.answer_bytes = data
                self._release(w)
                return answer
        except (EOFError, OSError):
            pass
        except Exception as exc:  # the answer arrived whole but does not unpickle here
            self._release(w)
            return Unreadable(exc)
        w.process.join(timeout=5)
        w.conn.close()
        return Died(w.process.exitcode)

    def _release(self, w: Worker) -> None:
        self.idle.append(w)
        while len(self.idle) > self.max_idle:
            self.stop([self.idle.pop(0)], grace=5.0)

    def kill(self, worker: Worker) -> None:
        """Kill a busy worker at once, with everything it started; it is reported by no later wait()."""
        self.busy.pop(worker.id, None)
        worker.signal(signal.SIGKILL)
        worker.process.join(timeout=5)
        worker.conn.close()

    def shutdown(self, *, grace: float, interrupted: float = 0.0) -> None:
        """Stop every worker (see `stop`); a second call does nothing."""
        workers = list(self.busy.values()) + self.idle
        self.busy.clear()
        self.idle = []
        self.stop(workers, grace=grace, interrupted=interrupted)

    @staticmethod
    def stop(workers: list[Worker], *, grace: float, interrupted: float = 0.0) -> None:
        """The stop escalation. Every worker is asked to exit once its work is done; busy ones get
        `interrupted` seconds when the stop signal reached them too (Ctrl-C), then SIGTERM and `grace`
        seconds to record their state; whatever is still alive then is killed with SIGKILL. Answers
        that arrive meanwhile are read and dropped: a worker blocked writing one could not exit."""
        for w in workers:
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        busy = [w for w in workers if w.busy_since is not None]
        if interrupted > 0:
            _drain_until(busy, time.monotonic() + interrupted)
        for w in busy:
            if w.process.is_alive():
                w.signal(signal.SIGTERM)
        _drain_until(workers, time.monotonic() + grace)
        for w in workers:
            if w.process.is_alive():
                w.signal(signal.SIGKILL)
            w.process.join(timeout=5)
            w.conn.close()


def _drain_until(workers: list[Worker], deadline: float) -> None:
    while time.monotonic() < deadline and any(w.process.is_alive() for w in workers):
        for w in workers:
            try:
                while not w.conn.closed and w.conn.poll(0):
                    w.conn.recv_bytes()
            except (EOFError, OSError):
                w.conn.close()
        sentinels = [w.process.sentinel for w in workers if w.process.is_alive()]
        if sentinels:
            wait_ready(sentinels, min(0.05, max(0.0, deadline - time.monotonic())))


def _key(env: dict[str, Optional[str]]) -> tuple:
    return tuple(sorted(env.items()))


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)
