"""Slot planning and the process pool behind `hydra/launcher=gpu`.

Each job runs in a fresh process from the spawn context. Its slot's variables are in the process
environment from its first instruction, so nothing it imports (torch, xgboost, lightgbm) sees
another device; `pipeline.hardware.detect()` reads them back as the job's hardware.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from multiprocessing.connection import wait as wait_ready
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException

from pipeline.errors import ConfigError
from pipeline.hardware import SLOT_CPUS_ENV, SLOT_GPUS_ENV, Machine
from pipeline.resources import DevicePool, Resources, cpu_count, fmt, gpu_amount

log = logging.getLogger(__name__)

CUDA_ENV = "CUDA_VISIBLE_DEVICES"
ZERO = Fraction(0)
INTERRUPT_GRACE_S = 5.0  # after Ctrl-C the jobs got the signal too: time to stop on their own
STOP_GRACE_S = 15.0  # after SIGTERM: time for a job to record its state before it is killed
EXIT_GRACE_S = 60.0  # a job that sent its result but does not exit is terminated after this


class LauncherConfigError(ConfigError, CompactHydraException):
    """A `hydra.launcher.*` value is invalid (printed without a traceback)."""


class JobFailedError(CompactHydraException):
    """A job ended without a return value: it exited, was killed, or its result could not be read."""


@dataclass(frozen=True)
class Settings:
    """The launcher's validated options."""

    gpus_per_job: Fraction
    cpus_per_job: Optional[int]
    n_jobs: Optional[int]
    devices: Optional[tuple[int, ...]]


def read_settings(gpus_per_job: Any, cpus_per_job: Any, n_jobs: Any, devices: Any) -> Settings:
    """Check the options that do not depend on the machine."""
    try:
        gpus = gpu_amount(gpus_per_job, "hydra.launcher.gpus_per_job")
        cpus = None if cpus_per_job is None else cpu_count(cpus_per_job, "hydra.launcher.cpus_per_job")
    except ConfigError as exc:
        raise LauncherConfigError(str(exc)) from None
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1):
        raise LauncherConfigError(
            f"hydra.launcher.n_jobs={n_jobs!r}: give the most jobs to run at once, an integer >= 1, "
            "or null for as many as the slots allow"
        )
    ids = None
    if devices is not None:
        ids = list(devices)
        if not ids or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in ids):
            raise LauncherConfigError(
                f"hydra.launcher.devices={ids!r}: give a list of CUDA device ids such as [0, 1], "
                "or null for every visible device"
            )
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise LauncherConfigError(
                f"hydra.launcher.devices={ids!r}: device ids must be unique; {dup} repeats"
            )
        if gpus == 0:
            raise LauncherConfigError(
                f"hydra.launcher.devices={ids!r} is set but hydra.launcher.gpus_per_job=0 gives jobs no GPU; "
                "set gpus_per_job (1, or a share such as 0.5) or leave devices null"
            )
    return Settings(gpus, cpus, n_jobs, None if ids is None else tuple(ids))


@dataclass(frozen=True)
class Slot:
    """Where one job runs: device ids (of this machine's visible devices), its GPU share and CPUs."""

    index: int
    device_ids: tuple[int, ...]
    tokens: tuple[str, ...]  # the devices' CUDA_VISIBLE_DEVICES tokens
    num_gpus: Fraction
    num_cpus: int

    def env(self) -> dict[str, Optional[str]]:
        """The variables a job process starts with; None removes a variable."""
        from pipeline.devices import child_env

        return {
            **child_env(self.tokens),  # CUDA_VISIBLE_DEVICES and the PCI bus order the tokens are in
            SLOT_CPUS_ENV: str(self.num_cpus),
            SLOT_GPUS_ENV: fmt(self.num_gpus) if self.tokens else None,
        }

    def describe(self) -> str:
        if not self.tokens:
            gpus = "no GPU"
        elif self.num_gpus < 1:
            gpus = f"GPU {self.tokens[0]} ({fmt(self.num_gpus)} of it)"
        else:
            gpus = f"GPU{'s' if len(self.tokens) > 1 else ''} {','.join(self.tokens)}"
        return f"slot {self.index}: {gpus}, {self.num_cpus} CPU{'s' if self.num_cpus != 1 else ''}"


def plan_slots(settings: Settings, machine: Machine, num_jobs: int) -> tuple[list[Slot], list[str]]:
    """The slots for a batch of `num_jobs` jobs, and warnings for the log.

    GPU shares pack first-fit, filling a device to 1.0 before the next (0.5 each on 4 devices:
    0, 0, 1, 1, 2, 2, 3, 3); whole numbers take whole free devices.
    """
    notes: list[str] = []
    ids = _device_ids(settings, machine)
    if settings.gpus_per_job > 0 and not ids:
        notes.append(
            f"no CUDA device is visible: jobs run on CPU slots and hydra.launcher.gpus_per_job="
            f"{fmt(settings.gpus_per_job)} is not used (set it to 0 to run on CPUs on purpose)"
        )
    need = settings.gpus_per_job if ids else ZERO
    if need > len(ids):
        raise LauncherConfigError(
            f"hydra.launcher.gpus_per_job={fmt(need)} but the jobs may use {len(ids)} device(s) "
            f"{list(ids)}; give at most {len(ids)} or a share such as 0.5"
            + (", or list more hydra.launcher.devices" if settings.devices is not None else "")
        )
    if settings.cpus_per_job is not None and settings.cpus_per_job > machine.num_cpus:
        raise LauncherConfigError(
            f"hydra.launcher.cpus_per_job={settings.cpus_per_job} but this machine has {machine.num_cpus} "
            f"CPUs; give at most {machine.num_cpus}, or null to divide them among the jobs"
        )
    if num_jobs < 1:
        return [], notes
    limit = num_jobs if settings.n_jobs is None else min(num_jobs, settings.n_jobs)
    if need == 0 and settings.n_jobs is None:
        limit = min(limit, max(1, machine.num_cpus // (settings.cpus_per_job or 1)))
    if settings.cpus_per_job is None:  # each job at least one CPU of its own: no more jobs at once than CPUs
        limit = min(limit, machine.num_cpus)
    capacity = min(Fraction(1), machine.gpu_capacity) if ids else ZERO
    pool = DevicePool(0, {i: capacity for i in ids})
    placements = []
    while len(placements) < limit:
        placed = pool.try_allocate(Resources(0, need))
        if placed is None:
            break
        placements.append(placed)
    if not placements:
        raise LauncherConfigError(
            f"hydra.launcher.gpus_per_job={fmt(need)} does not fit on the devices {list(ids)} "
            f"(each offers {fmt(capacity)} GPU); lower it"
        )
    cpus = settings.cpus_per_job or max(1, machine.num_cpus // len(placements))
    if cpus * len(placements) > machine.num_cpus:
        notes.append(
            f"{len(placements)} jobs at once with {cpus} CPU(s) each ask for {cpus * len(placements)} CPUs "
            f"but this machine has {machine.num_cpus}: they share them (set hydra.launcher.n_jobs to run "
            "fewer at once)"
        )
    slots = [
        Slot(n, tuple(d for d, _ in placed), tuple(machine.gpu_tokens[d] for d, _ in placed),
             sum((s for _, s in placed), ZERO), cpus)
        for n, placed in enumerate(placements)
    ]
    return slots, notes


def check_machine(settings: Settings) -> None:
    """Raise now, before any job starts, when the options do not fit this machine."""
    from pipeline.hardware import detect

    plan_slots(settings, detect(), 1)


def _device_ids(settings: Settings, machine: Machine) -> list[int]:
    visible = machine.num_gpus
    if settings.devices is None:
        return list(range(visible)) if settings.gpus_per_job > 0 else []
    bad = [i for i in settings.devices if i >= visible]
    if bad:
        have = f"ids 0-{visible - 1}" if visible else "no CUDA device"
        raise LauncherConfigError(
            f"hydra.launcher.devices={list(settings.devices)}: device {bad[0]} is out of range; this machine "
            f"shows {visible} CUDA device(s) ({have}); give ids from that range or null for all"
        )
    return list(settings.devices)


# --------------------------------------------------------------------------- launching


@dataclass
class _Job:
    idx: int
    overrides: list[str]
    config: Any  # the job's composed sweep config

    @property
    def shown(self) -> str:
        return shown_overrides(self.overrides)


def shown_overrides(overrides: Sequence[str]) -> str:
    """A job's overrides as the log names it (Hydra's filter drops its own hydra.* keys)."""
    from hydra.core.utils import filter_overrides

    return " ".join(filter_overrides(overrides)) or "no overrides"


@dataclass
class _Running:
    job: _Job
    slot: Slot
    process: Any
    conn: Any  # the read end of the job's result pipe
    started: float
    payload: Optional[bytes] = None  # the job's pickled JobReturn, once it arrives
    received: Optional[float] = None


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    """Run every job of the batch, as many at once as there are slots; returns in job order."""
    queue = deque(enumerate(job_overrides, start=initial_job_idx))
    results: dict[int, JobReturn] = {}

    def take():
        return queue.popleft() if queue else None

    def keep(idx: int, ret: JobReturn) -> None:
        results[idx] = ret

    launch_stream(launcher, take, keep, max_jobs=len(job_overrides), total=len(job_overrides))
    return [results[initial_job_idx + pos] for pos in range(len(job_overrides))]


def launch_stream(
    launcher,
    next_job: Callable[[], Optional[tuple[int, Sequence[str]]]],
    on_return: Callable[[int, JobReturn], None],
    *,
    max_jobs: int,
    total: Optional[int] = None,
) -> None:
    """Start jobs while slots are free: `next_job()` gives the next (job number, overrides), or None
    when there is none; each job's return goes to `on_return` as soon as its process ends, and its
    slot takes the next job at once. Slots are planned for `max_jobs` jobs at a time."""
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
    _Pool(slots, common).run(compose, lambda job, ret: on_return(job.idx, ret))


class _Stopped(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _Pool:
    """Starts jobs on free slots and collects their returns; a slot frees when its process exits."""

    def __init__(self, slots: list[Slot], common: bytes):
        self.ctx = multiprocessing.get_context("spawn")
        self.free = list(slots)
        self.common = common
        self.running: dict[int, _Running] = {}

    def run(self, next_job: Callable[[], Optional[_Job]], on_return: Callable[[_Job, JobReturn], None]) -> None:
        """Fill free slots from `next_job` until it gives None; hand each return over as it arrives."""
        previous = _install_handlers()
        exhausted = False
        try:
            while True:
                while not exhausted and self.free:
                    job = next_job()
                    if job is None:
                        exhausted = True
                    else:
                        self._start(job, self.free.pop(0))
                if not self.running:
                    break
                for job, ret in self._collect():
                    on_return(job, ret)
        except _Stopped as stop:
            name = signal.Signals(stop.signum).name
            log.error(f"stopped by {name}: stopping {len(self.running)} running job(s)")
            self._stop_all(signal_sent=stop.signum == signal.SIGINT)
            raise SystemExit(128 + stop.signum) from None  # the exit status a shell gives a signalled process
        except BaseException:
            self._stop_all(signal_sent=False)
            raise
        finally:
            _restore_handlers(previous)

    def _start(self, job: _Job, slot: Slot) -> None:
        import cloudpickle

        reader, writer = self.ctx.Pipe(duplex=False)
        env = slot.env()
        args = (writer, self.common, cloudpickle.dumps(job.config), job.idx, job.overrides, env)
        process = self.ctx.Process(target=job_main, args=args, name=f"hydra-job-{job.idx}")
        log.info(f"\t#{job.idx} : {slot.describe()} : {job.shown}")
        with _environment(env):  # the child's environment is copied from ours when it starts
            process.start()
        writer.close()
        self.running[job.idx] = _Running(job, slot, process, reader, time.monotonic())

    def _collect(self) -> list[tuple[_Job, JobReturn]]:
        """Wait for the next event: a result arriving, a process exiting, or an exit grace running out;
        returns the jobs that ended, with their returns."""
        waitables = {}
        for pos, r in self.running.items():
            if not r.conn.closed:
                waitables[r.conn] = pos
            waitables[r.process.sentinel] = pos
        deadlines = [r.received + EXIT_GRACE_S for r in self.running.values() if r.received is not None]
        timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
        ready = set(wait_ready(list(waitables), timeout))
        ended = []
        for r in self.running.values():
            if r.conn in ready:
                self._receive(r)
        for pos, r in list(self.running.items()):
            if r.process.sentinel in ready:
                r.process.join(5)
            elif r.received is not None and time.monotonic() - r.received >= EXIT_GRACE_S:
                log.warning(f"job #{r.job.idx} returned its result but its process did not exit in "
                            f"{EXIT_GRACE_S:.0f}s; terminating it")
                _ensure_dead(r.process)
            else:
                continue
            if not r.conn.closed:
                self._receive(r)  # a result sent just before the exit
            del self.running[pos]
            ended.append((r.job, self._result(r)))
            self.free.append(r.slot)
            self.free.sort(key=lambda s: s.index)
        return ended

    @staticmethod
    def _receive(r: _Running) -> None:
        try:
            if r.conn.poll():  # True on data and on end-of-file
                r.payload = r.conn.recv_bytes()
                r.received = time.monotonic()
            else:
                return
        except (EOFError, OSError):
            pass
        r.conn.close()

    def _result(self, r: _Running) -> JobReturn:
        import cloudpickle

        if r.payload is None:
            code = r.process.exitcode
            if code is not None and code < 0:
                reason = f"killed by signal {_signal_name(-code)}"
            else:
                reason = f"exited with code {code}"
            return failed_return(r.job.overrides, JobFailedError(
                f"job #{r.job.idx} ({r.job.shown}) died ({reason}) before it returned a result; "
                "its output above and its run directory show how far it got"
            ))
        try:
            ret = cloudpickle.loads(r.payload)
        except Exception as exc:
            return failed_return(r.job.overrides, JobFailedError(
                f"job #{r.job.idx} ({r.job.shown}) finished but its result could not be read: "
                f"{type(exc).__name__}: {exc}"
            ))
        state = "COMPLETED" if ret.status == JobStatus.COMPLETED else "FAILED"
        log.info(f"\t#{r.job.idx} : {state} after {time.monotonic() - r.started:.1f}s")
        return ret

    def _stop_all(self, *, signal_sent: bool) -> None:
        """Stop every running job: SIGTERM, a grace period to record its state, then SIGKILL."""
        ignored = _ignore_signals()
        try:
            procs = list(self.running.values())
            if signal_sent:  # Ctrl-C reached the jobs too: let them stop on their own first
                self._drain_until(procs, time.monotonic() + INTERRUPT_GRACE_S)
            for r in procs:
                if r.process.is_alive():
                    r.process.terminate()
            self._drain_until(procs, time.monotonic() + STOP_GRACE_S)
            for r in procs:
                _ensure_dead(r.process)
                r.conn.close()
            self.running.clear()
        finally:
            _restore_handlers(ignored)

    @staticmethod
    def _drain_until(procs: list[_Running], deadline: float) -> None:
        # A job blocked writing a large result to its pipe could not exit: read and drop it.
        while time.monotonic() < deadline and any(r.process.is_alive() for r in procs):
            for r in procs:
                try:
                    while not r.conn.closed and r.conn.poll(0):
                        r.conn.recv_bytes()
                except (EOFError, OSError):
                    r.conn.close()
            time.sleep(0.05)


def failed_return(overrides: Sequence[str], error: BaseException) -> JobReturn:
    """A FAILED JobReturn carrying `error`, as `run_job` builds for a task that raised."""
    ret = JobReturn(overrides=list(overrides))
    ret.status = JobStatus.FAILED
    ret.return_value = error
    return ret


def _ensure_dead(process) -> None:
    if process.is_alive():
        process.terminate()
        process.join(5)
    if process.is_alive():
        process.kill()
        process.join()


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def _raise_stopped(signum, frame):
    raise _Stopped(signum)


def _install_handlers() -> dict:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _raise_stopped) for sig in (signal.SIGINT, signal.SIGTERM)}


def _ignore_signals() -> dict:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore_handlers(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def _apply_env(env: dict[str, Optional[str]]) -> None:
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@contextlib.contextmanager
def _environment(env: dict[str, Optional[str]]):
    saved = {key: os.environ.get(key) for key in env}
    _apply_env(env)
    try:
        yield
    finally:
        _apply_env(saved)


# --------------------------------------------------------------------------- the job process


def job_main(conn, common: bytes, payload: bytes, idx: int, overrides: list[str], env: dict) -> None:
    """Entry point of a job process: run the job as Hydra's `run_job` does, send back its JobReturn."""
    _apply_env(env)
    shown = shown_overrides(overrides)
    try:
        import cloudpickle
        from hydra.core.hydra_config import HydraConfig
        from hydra.core.singleton import Singleton
        from hydra.core.utils import run_job, setup_globals

        hydra_context, task_function, singleton_state = cloudpickle.loads(common)
        config = cloudpickle.loads(payload)
        setup_globals()
        Singleton.set_state(singleton_state)
        HydraConfig.instance().set_config(config)
        ret = run_job(
            hydra_context=hydra_context, task_function=task_function, config=config,
            job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir",
        )
        if ret.status == JobStatus.FAILED:
            # The exception crosses a process boundary without its traceback: show it here.
            error = ret._return_value
            print(f"job #{idx} ({shown}) failed:", file=sys.stderr)
            traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    except SystemExit as exc:
        if exc.code in (None, 0):
            ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
        else:
            ret = failed_return(overrides, JobFailedError(
                f"job #{idx} ({shown}) exited with code {exc.code}; its error is printed above"
            ))
    except BaseException as exc:  # KeyboardInterrupt, or a failure before the task started
        traceback.print_exc()
        error = JobFailedError(f"job #{idx} ({shown}) stopped: {type(exc).__name__}: {exc}")
        ret = failed_return(overrides, error)
    sys.stdout.flush()
    sys.stderr.flush()
    conn.send_bytes(_dump_return(ret, idx, shown))
    conn.close()


def _dump_return(ret: JobReturn, idx: int, shown: str) -> bytes:
    import cloudpickle

    try:
        data = cloudpickle.dumps(ret)
        cloudpickle.loads(data)  # an exception whose __init__ takes other arguments fails only here
        return data
    except Exception as exc:
        value = ret._return_value
        if ret.status == JobStatus.FAILED:
            error = JobFailedError(f"job #{idx} ({shown}) failed: {type(value).__name__}: {value}")
        else:
            error = JobFailedError(
                f"job #{idx} ({shown}) returned a {type(value).__name__}, which cannot be sent back to the "
                f"launcher ({type(exc).__name__}: {exc})"
            )
        return cloudpickle.dumps(failed_return(ret.overrides or [], error))
