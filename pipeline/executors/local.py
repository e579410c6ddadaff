"""The local executor: worker processes pinned to device slots, or the driver itself for tiny plans."""

from __future__ import annotations

import itertools
import logging
import threading
from collections import Counter
from pathlib import Path
from typing import Optional

from pipeline.accelerators import local_ordinals
from pipeline.graph.backend import Backend
from pipeline.graph.datafile import write_data_file
from pipeline.graph.tasks import DataRef, FitRequest, TaskFailure, safe_run_fit
from pipeline.executors.pool import Died, Unreadable, Worker, WorkerPool
from pipeline.hardware import Hardware
from pipeline.graph.plan import Plan

log = logging.getLogger(__name__)


class InProcessBackend(Backend):
    """Fits in the driver, one at a time: for plans with a single slot, where a process start costs
    more than the fit. The driver's own devices are used by id, without CUDA_VISIBLE_DEVICES."""

    name = "in-process"
    one_at_a_time = True  # submit runs the fit: the scheduler reads each result before it starts the next

    def __init__(self, preload: tuple[str, ...] = ()):
        self.done: dict[int, object] = {}
        self.counter = itertools.count()
        # the model libraries, and what their fits import on first use (torch's optimizers: torch._dynamo),
        # imported while the driver loads the data: a first fit that imported them would look a second or
        # more slower than the rest, and a time limit would plan with that; the engine's own modules
        # (a lean run's preload) are the driver's already. A fit does not start before all are imported:
        # one beside the import thread shares its GIL (Catsup's first LightGBM fold took 1.96 s against
        # 0.25 s, and the estimates made from it left a 30-s run 31 fits against 72)
        modules = tuple(m for m in preload if m.split(".")[0] != "pipeline")
        self.importing = import_in_background(modules) if modules else None

    def prepare(self, plan: Plan, data) -> DataRef:
        if self.importing is not None:
            self.importing.join()
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


# What every fit imports: the fit itself, and the data file's table (pipeline.data with pandas and Hydra's
# config classes: about 0.5 s on the idle 2-core box, paid by each new worker's first fit where the forkserver
# had not imported it, a retried fit's included, and counted in executor.task_timeout_s).
WORKER_MODULES = ("pipeline.graph.tasks", "pipeline.data")


class ProcessBackend(Backend):
    """Fits in a pool of worker processes keyed by the devices they see (see `pool.WorkerPool`).

    The forkserver is started once per driver process: a later run in the same process keeps the
    libraries it preloaded (a worker imports any other library itself).

    A task runs in an idle worker bound to exactly its device ids, or in a fresh one. A worker
    that dies (SIGKILL, a segfault, the OOM killer) fails its task instead of hanging the run.
    """

    name = "processes"

    def __init__(self, hardware: Hardware, run_dir: Path, preload: tuple[str, ...] = (), max_idle: int = 8):
        self.hardware, self.run_dir = hardware, run_dir
        # Workers fork from a server process that imported the model libraries once and never touches
        # a GPU: each starts in milliseconds, with no CUDA context, and sets CUDA_VISIBLE_DEVICES first.
        self.preload = preload
        self.pool = WorkerPool("forkserver", safe_run_fit, detach=True, preload=(*WORKER_MODULES, *preload),
                               max_idle=max_idle, name="fit-worker")
        self.handles: dict[int, Worker] = {}
        self.answers_pickled: dict[int, bytes] = {}  # handle -> its result as the worker pickled it
        self.counter = itertools.count()
        self._starting: Optional[threading.Thread] = None
        self._start_error: Optional[BaseException] = None
        self.importing: Optional[threading.Thread] = None  # the driver's imports of the preload modules

    def start(self, plan: Plan) -> None:
        """Spawn the workers the plan's first waves need, in a background thread, while the driver
        loads the data: starting the forkserver (it imports the model libraries) blocks for a while.
        Meanwhile the driver imports those libraries too (`import_in_background`): their packages,
        which unpickling the fitted models needs, not the modules only a fit uses."""
        self._starting = threading.Thread(target=self._start, args=(plan,), name="worker-start", daemon=True)
        self._starting.start()
        self.importing = import_in_background(tuple(dict.fromkeys(m.split(".")[0] for m in self.preload)))

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
        self.pool.max_idle = max(self.pool.max_idle, plan.max_concurrency)
        wanted: Counter[tuple[int, ...]] = Counter()
        for wave in {t.wave for t in plan.fit_tasks}:
            wanted |= Counter(t.device_ids for t in plan.fit_tasks if t.wave == wave)  # | keeps the larger count
        for devices in wanted.elements():
            self.pool.spawn(self.hardware.worker_env(devices))

    def prepare(self, plan: Plan, data) -> DataRef:
        self._ready()
        path = self.run_dir / "data" / "data.pkl"  # a folder made 0755 (Hydra makes the run directory under the umask)
        write_data_file(path, data)
        return DataRef(path=str(path), fingerprint=data.fingerprint)

    def submit(self, request: FitRequest):
        handle = next(self.counter)
        self.handles[handle] = self.pool.submit(self.hardware.worker_env(request.gpu_ids), request)
        return handle

    def wait(self, handles, timeout: Optional[float] = None):
        by_worker = {self.handles[h].id: h for h in handles}
        out = []
        for worker, answer in self.pool.wait([self.handles[h] for h in handles], timeout):
            handle = by_worker[worker.id]
            del self.handles[handle]
            if worker.answer_bytes is not None:  # (set only where the answer unpickled)
                self.answers_pickled[handle] = worker.answer_bytes
            worker.answer_bytes = None
            if isinstance(answer, Died):
                answer = TaskFailure("", f"the worker process died ({answer.reason}) during the fit")
            elif isinstance(answer, Unreadable):
                answer = TaskFailure("", f"the fit's result could not be read: {answer.error!r}")
            out.append((handle, answer))
        return out

    def pickled(self, handle) -> Optional[bytes]:
        return self.answers_pickled.pop(handle, None)

    def cancel(self, handle) -> None:
        """Kill the worker running `handle` with everything it started (DDP ranks share its process group)."""
        self.pool.kill(self.handles.pop(handle))

    def shutdown(self) -> None:
        self._join_start()
        self.pool.shutdown(grace=2.0)  # a run that stops early: its fits are killed after a short grace
        self.handles.clear()
        self.answers_pickled.clear()


def import_in_background(modules: tuple[str, ...]) -> threading.Thread:
    """Import `modules` in a daemon thread of the driver. The driver unpickles each fitted model a
    worker sends; the first of each kind would import its library there (torch takes over a second),
    while the workers wait for their next fit. Started with the workers, the imports run while the
    forkserver does the same on the other core. A module that fails to import is left to the unpickling
    that needs it, which reports it."""

    def load() -> None:
        import importlib

        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001
                log.debug("the driver could not import %s ahead of the results", name, exc_info=True)

    thread = threading.Thread(target=load, name="driver-imports", daemon=True)
    thread.start()
    return thread


def make_local_backend(mode: str, plan: Plan, run_dir: Path, preload: tuple[str, ...] = ()):
    """in_process: auto (when one slot covers the plan), always, or never."""
    single_slot = plan.max_concurrency <= 1
    if mode == "always" or (mode == "auto" and single_slot):
        return InProcessBackend(preload)
    return ProcessBackend(plan.hardware, run_dir, preload)
