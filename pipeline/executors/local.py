"""The local executor: worker processes pinned to device slots, or the driver itself for tiny plans."""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import pickle
import signal
import threading
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_connections
from pathlib import Path
from typing import Optional

from pipeline.devices import child_env, local_ordinals
from pipeline.executors.backend import Backend
from pipeline.executors.tasks import DataRef, FitRequest, TaskFailure, safe_run_fit, write_data_file
from pipeline.executors.worker import worker_main
from pipeline.hardware import Hardware
from pipeline.plan import Plan

log = logging.getLogger(__name__)


class InProcessBackend(Backend):
    """Fits in the driver, one at a time: for plans with a single slot, where a process start costs
    more than the fit. The driver's own devices are used by id, without CUDA_VISIBLE_DEVICES."""

    name = "in-process"

    def __init__(self):
        self.done: dict[int, object] = {}
        self.counter = itertools.count()

    def prepare(self, plan: Plan, data) -> DataRef:
        return DataRef(obj=data)

    def submit(self, request: FitRequest):
        handle = next(self.counter)
        request.local_gpus = local_ordinals(request.gpu_ids, sees_only_its_devices=False)
        self.done[handle] = safe_run_fit(request)
        return handle

    def wait(self, handles, timeout=None):
        return [(h, self.done.pop(h)) for h in handles if h in self.done]

    def shutdown(self) -> None:
        self.done.clear()


@dataclass
class _Worker:
    process: multiprocessing.Process
    conn: object
    devices: tuple[int, ...]


class ProcessBackend(Backend):
    """A pool of worker processes keyed by the devices they see.

    The forkserver is started once per driver process: a later run in the same process keeps the
    libraries it preloaded (a worker imports any other library itself).

    A task runs in an idle worker bound to exactly its device ids, or in a fresh one. A worker
    that dies (SIGKILL, a segfault, the OOM killer) fails its task instead of hanging the run.
    """

    name = "processes"

    def __init__(self, hardware: Hardware, run_dir: Path, preload: tuple[str, ...] = (), max_idle: int = 8):
        self.hardware, self.run_dir, self.preload = hardware, run_dir, tuple(preload)
        # Workers fork from a server process that imported the model libraries once and never touches
        # a GPU: each starts in milliseconds, with no CUDA context, and sets CUDA_VISIBLE_DEVICES first.
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["pipeline.executors.worker", "pipeline.executors.tasks", *self.preload])
        self.idle: list[_Worker] = []
        self.busy: dict[int, _Worker] = {}
        self.counter = itertools.count()
        self.max_idle = max_idle
        self._starting: Optional[threading.Thread] = None
        self._start_error: Optional[BaseException] = None

    def start(self, plan: Plan) -> None:
        """Spawn the workers the plan's first waves need, in a background thread, while the driver
        loads the data: starting the forkserver (it imports the model libraries) blocks for a while."""
        self._starting = threading.Thread(target=self._start, args=(plan,), name="worker-start", daemon=True)
        self._starting.start()

    def _join_start(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None

    def _ready(self) -> None:
        """Wait for the background start; re-raise what it raised."""
        self._join_start()
        if self._start_error is not None:
            error, self._start_error = self._start_error, None
            raise error

    def _start(self, plan: Plan) -> None:
        try:
            self._spawn_for(plan)
        except BaseException as exc:  # surfaced by prepare(), in the driver's thread
            self._start_error = exc

    def _spawn_for(self, plan: Plan) -> None:
        """As many workers per device set as the busiest wave runs on it at once."""
        self.max_idle = max(self.max_idle, plan.max_concurrency)
        wanted: Counter[tuple[int, ...]] = Counter()
        for wave in {t.wave for t in plan.fit_tasks}:
            wanted |= Counter(t.device_ids for t in plan.fit_tasks if t.wave == wave)  # | keeps the larger count
        for devices in wanted.elements():
            self.idle.append(self._spawn(devices))

    def prepare(self, plan: Plan, data) -> DataRef:
        self._ready()
        path = self.run_dir / "data.pkl"
        write_data_file(path, data)
        return DataRef(path=str(path), fingerprint=data.fingerprint)

    def submit(self, request: FitRequest):
        worker = self._worker_for(tuple(request.gpu_ids))
        handle = next(self.counter)
        self.busy[handle] = worker
        try:
            worker.conn.send(request)
        except (BrokenPipeError, OSError):
            pass  # the worker died: wait() reports it through its sentinel
        return handle

    def _worker_for(self, devices: tuple[int, ...]) -> _Worker:
        for i, w in enumerate(self.idle):
            if w.devices == devices and w.process.is_alive():
                return self.idle.pop(i)
        return self._spawn(devices)

    def _spawn(self, devices: tuple[int, ...]) -> _Worker:
        env = child_env(self.hardware.visible_devices(devices).split(",") if devices else ())
        parent, child = self.ctx.Pipe()
        process = self.ctx.Process(target=worker_main, args=(child, env, self.preload), name=f"fit-worker-{devices}")
        process.start()
        child.close()
        return _Worker(process, parent, devices)

    def wait(self, handles, timeout: Optional[float] = None):
        by_conn = {}
        for h in handles:
            w = self.busy[h]
            by_conn[w.conn] = h
            by_conn[w.process.sentinel] = h
        ready = wait_connections(list(by_conn), timeout)
        out, seen = [], set()
        for obj in ready:
            h = by_conn[obj]
            if h in seen:
                continue
            seen.add(h)
            w = self.busy.pop(h)
            result = None
            try:
                if w.conn.poll():
                    result = w.conn.recv()
            except (EOFError, OSError, pickle.UnpicklingError):
                result = None
            if result is None:
                w.process.join(timeout=5)
                code = w.process.exitcode
                reason = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                out.append((h, TaskFailure("", f"the worker process died ({reason}) during the fit")))
                continue
            self._release(w)
            out.append((h, result))
        return out

    def cancel(self, handle) -> None:
        """Kill the worker running `handle` with everything it started (DDP ranks share its process group)."""
        w = self.busy.pop(handle)
        try:
            os.killpg(w.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            w.process.kill()
        w.process.join(timeout=5)
        w.conn.close()

    def _release(self, w: _Worker) -> None:
        self.idle.append(w)
        while len(self.idle) > self.max_idle:
            self._stop(self.idle.pop(0))

    def _stop(self, w: _Worker, timeout: float = 5.0) -> None:
        try:
            w.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        w.process.join(timeout)
        if w.process.is_alive():
            w.process.terminate()
            w.process.join(timeout)
        if w.process.is_alive():
            w.process.kill()
            w.process.join()

    def shutdown(self) -> None:
        self._join_start()
        for w in self.busy.values():  # a run that stops early: kill its fits at once
            w.process.terminate()
        for w in list(self.busy.values()) + self.idle:
            self._stop(w, timeout=2.0)
        self.busy.clear()
        self.idle.clear()


def make_local_backend(mode: str, plan: Plan, run_dir: Path, preload: tuple[str, ...] = ()):
    """in_process: auto (when one slot covers the plan), always, or never."""
    single_slot = plan.max_concurrency <= 1
    if mode == "always" or (mode == "auto" and single_slot):
        return InProcessBackend()
    return ProcessBackend(plan.hardware, run_dir, preload)
