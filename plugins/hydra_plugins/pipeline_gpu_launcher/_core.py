"""How `hydra/launcher=gpu` runs a sweep: one warm worker process per slot takes the slot's jobs.

A slot's worker is started once, with the slot's variables in its environment from its first
instruction (see `_slots`), and runs one job after another (see `_job`), so a sweep pays for a
process start and the imports once per slot rather than once per job. Workers come from the
engine's one worker pool (`pipeline.executors.pool`), which also stops them; the stop signals are
handled as a run handles them (`pipeline.signals`).
"""

from __future__ import annotations

import logging
import signal
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from hydra.core.utils import JobReturn, JobStatus

from hydra_plugins.pipeline_gpu_launcher._job import JobFailedError, JobServer, failed_return, shown_overrides
from hydra_plugins.pipeline_gpu_launcher._slots import Slot, plan_slots
from pipeline.errors import Interrupted
from pipeline.executors.pool import Died, Worker, WorkerPool
from pipeline.signals import StopSignals

log = logging.getLogger(__name__)

INTERRUPT_GRACE_S = 5.0  # after Ctrl-C the jobs got the signal too: time to stop on their own
STOP_GRACE_S = 15.0  # after SIGTERM: time for a job to record its state before it is killed


@dataclass
class _Job:
    idx: int
    overrides: list[str]
    config: Any  # the job's composed sweep config

    @property
    def shown(self) -> str:
        return shown_overrides(self.overrides)


@dataclass
class _Running:
    job: _Job
    slot: Slot
    worker: Worker
    started: float


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    """Run every job of the batch, as many at once as there are slots; returns in job order."""
    queue = deque(enumerate(job_overrides, start=initial_job_idx))
    results: dict[int, JobReturn] = {}

    def take():
        return queue.popleft() if queue else None

    def keep(idx: int, ret: JobReturn) -> None:
        results[idx] = ret

    launch_stream(launcher, take, keep, max_jobs=len(job_overrides), total=len(job_overrides), compose_ahead=True)
    return [results[initial_job_idx + pos] for pos in range(len(job_overrides))]


def launch_stream(
    launcher,
    next_job: Callable[[], Optional[tuple[int, Sequence[str]]]],
    on_return: Callable[[int, JobReturn], None],
    *,
    max_jobs: int,
    total: Optional[int] = None,
    compose_ahead: bool = False,
) -> None:
    """Start jobs while slots are free: `next_job()` gives the next (job number, overrides), or None
    when there is none; each job's return goes to `on_return` as soon as it arrives, and its slot
    takes the next job at once. Slots are planned for `max_jobs` jobs at a time. With
    `compose_ahead` (jobs known up front), the next job is composed while the slots are busy, so a
    slot that frees starts it at once; a stream (a sweeper that picks the next job from the returns
    so far) is asked only when a slot is free."""
    import cloudpickle
    from hydra.core.singleton import Singleton
    from hydra.core.utils import configure_log, setup_globals
    from omegaconf import open_dict

    from pipeline.hardware import detect

    setup_globals()
    config = launcher.config
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    slots, notes = plan_slots(launcher.settings, detect(), max_jobs)
    for note in notes:
        log.warning(note)
    count = f"{total} jobs" if total is not None else "jobs as slots free"
    log.info(f"Launching {count} on {len(slots)} slot(s), sweep output dir : {sweep_dir}")

    def compose() -> Optional[_Job]:
        item = next_job()
        if item is None:
            return None
        idx, overrides = item
        job_config = launcher.hydra_context.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(job_config):
            job_config.hydra.job.id = idx
            job_config.hydra.job.num = idx
        return _Job(idx, list(overrides), job_config)

    common = cloudpickle.dumps((launcher.hydra_context, launcher.task_function, Singleton.get_state()))
    _Sweep(slots, common).run(compose, lambda job, ret: on_return(job.idx, ret), compose_ahead=compose_ahead)


class _Sweep:
    """Gives each free slot the next job and collects the returns; a slot frees when its job returns
    (its worker waits for the next one) or its worker dies (the slot's next job gets a fresh one)."""

    def __init__(self, slots: list[Slot], common: bytes):
        # spawn: a job's worker starts from a fresh interpreter, its slot's variables set first
        self.pool = WorkerPool("spawn", JobServer(common), detach=False, max_idle=len(slots), name="hydra-slot")
        self.free = list(slots)
        self.running: dict[int, _Running] = {}  # by worker id

    def run(self, next_job: Callable[[], Optional[_Job]], on_return: Callable[[_Job, JobReturn], None],
            compose_ahead: bool = False) -> None:
        """Fill free slots from `next_job` until it gives None; hand each return over as it arrives.
        With `compose_ahead`, one job is taken from `next_job` while every slot is busy."""
        ahead: deque[_Job] = deque()
        with StopSignals() as stops:
            try:
                for slot in self.free:  # every slot's worker imports while the first jobs are composed
                    self.pool.spawn(slot.env())
                exhausted = False
                while True:
                    while self.free and (ahead or not exhausted):
                        job = ahead.popleft() if ahead else next_job()
                        if job is None:
                            exhausted = True
                        else:
                            self._start(job, self.free.pop(0))
                    if not self.running:
                        break
                    if compose_ahead and not exhausted and not ahead:
                        job = next_job()
                        ahead.append(job) if job is not None else None
                        exhausted = job is None
                    for job, ret in self._collect():
                        on_return(job, ret)
            except Interrupted as stop:
                name = signal.Signals(stop.signum).name
                log.error(f"stopped by {name}: stopping {len(self.running)} running job(s)")
                self.pool.shutdown(grace=STOP_GRACE_S,
                                   interrupted=INTERRUPT_GRACE_S if stop.signum == signal.SIGINT else 0.0)
                raise SystemExit(stop.exit_code) from None  # the exit status a shell gives a signalled process
            finally:
                stops.clean_up()
                self.pool.shutdown(grace=STOP_GRACE_S)  # a no-op after the stop above

    def _start(self, job: _Job, slot: Slot) -> None:
        import cloudpickle

        log.info(f"\t#{job.idx} : {slot.describe()} : {job.shown}")
        payload = cloudpickle.dumps((job.config, job.idx, job.overrides))
        worker = self.pool.submit(slot.env(), payload)
        self.running[worker.id] = _Running(job, slot, worker, time.monotonic())

    def _collect(self) -> list[tuple[_Job, JobReturn]]:
        """Wait for the next jobs to return or their workers to die; returns them with their returns."""
        ended = []
        for worker, answer in self.pool.wait([r.worker for r in self.running.values()]):
            r = self.running.pop(worker.id)
            ended.append((r.job, self._result(r, answer)))
            self.free.append(r.slot)
        self.free.sort(key=lambda s: s.index)
        return ended

    @staticmethod
    def _result(r: _Running, answer: Any) -> JobReturn:
        import cloudpickle

        if isinstance(answer, Died):
            return failed_return(r.job.overrides, JobFailedError(
                f"job #{r.job.idx} ({r.job.shown}) died ({answer.reason}) before it returned a result; "
                "its output above and its run directory show how far it got"
            ))
        try:
            ret = cloudpickle.loads(answer)
        except Exception as exc:
            return failed_return(r.job.overrides, JobFailedError(
                f"job #{r.job.idx} ({r.job.shown}) finished but its result could not be read: "
                f"{type(exc).__name__}: {exc}"
            ))
        state = "COMPLETED" if ret.status == JobStatus.COMPLETED else "FAILED"
        log.info(f"\t#{r.job.idx} : {state} after {time.monotonic() - r.started:.1f}s")
        return ret
