"""When a run started, for `time_limit_s`: the process's own start for its first run (the interpreter,
imports and Hydra's composition count, as a user waits for them), the call for a later one (the next
job of a sweep run in the same process); and how much of a CPU its start-up got, which tells how busy
the machine is now (what the run's tail will take: pipeline.graph.tail)."""

from __future__ import annotations

import os
import time
from typing import Optional

_runs = 0
_thread_at_start = 0.0  # the main thread's CPU seconds when this run started (0: the process's first run)
_wall_at_start = 0.0
_share = None  # this run's start-up CPU share, once measured
_machine_at_start = None  # (wall, the machine's busy CPU seconds, this process's CPU seconds) when noted
_machine_before = None  # the note before it (a sweep's earlier job): the longer window a quick choice reads
LEAST_SHARE = 0.05
MEASURABLE_S = 0.2  # /proc/stat counts in clock ticks (10 ms): a shorter window tells nothing


def process_started() -> float:
    """time.time() the operating system started this process: Linux's /proc gives the start in clock ticks
    since boot (CLOCK_BOOTTIME), and the boot's time.time() is now less the time since boot (/proc/stat's
    btime is whole seconds, which put the start up to a second early); elsewhere, now."""
    try:
        with open("/proc/self/stat") as f:
            ticks = float(f.read().rsplit(")", 1)[1].split()[19])  # field 22, counted after the name
        boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError, IndexError):
        return time.time()


def run_started() -> float:
    global _runs, _thread_at_start, _wall_at_start, _share
    _runs += 1
    _share = None
    if _runs == 1:
        _thread_at_start, _wall_at_start = 0.0, process_started()
        if _machine_at_start is None:
            note_machine()
    else:
        _thread_at_start, _wall_at_start = time.thread_time(), time.time()
        note_machine()
    return _wall_at_start


def run_number() -> int:
    """How many runs this process has started (a sweep's jobs run in one process): 0 before the first."""
    return _runs


def note_machine() -> None:
    """Note the machine's busy CPU time and this process's now: `others_busy_cpus` measures from here
    (called first thing by `python -m pipeline`, and at each later run of the same process)."""
    global _machine_at_start, _machine_before
    _machine_before = _machine_at_start
    _machine_at_start = machine_reading()


def machine_reading() -> Optional[tuple[float, float, float]]:
    """(time.time(), the machine's busy CPU seconds, this process's and its descendants'); None where
    /proc/stat cannot tell. Two readings give the others' CPUs between them (`others_between`)."""
    busy = _machine_busy_seconds()
    return None if busy is None else (time.time(), busy, _own_seconds())


def others_between(earlier: tuple[float, float, float], later: tuple[float, float, float]) -> float:
    """How many CPUs' worth of work other processes did between two `machine_reading`s: the machine's busy
    time less this process's and its descendants', over the wall time."""
    return max(0.0, (later[1] - earlier[1] - (later[2] - earlier[2])) / (later[0] - earlier[0]))


def others_busy_cpus() -> Optional[float]:
    """How many CPUs' worth of work other processes did since `note_machine`: the machine's busy time
    (Linux's /proc/stat, every CPU) less this process's and its descendants' (`_own_seconds`), over the
    wall time; None where it cannot be told (no /proc/stat, or under MEASURABLE_S measured, a few clock
    ticks). A later job of a sweep, which reads this a moment after its own note, reads it from the note
    before (its earlier job's: this process's own work in that job is not counted)."""
    now = machine_reading()
    if now is None:
        return None
    for note in (_machine_at_start, _machine_before):
        if note is not None and now[0] - note[0] >= MEASURABLE_S:
            return others_between(note, now)
    return None


def _own_seconds() -> float:
    """CPU seconds of this process and of the processes it started: those it waited for (os.times) and
    those alive (/proc). A sweep's tracking service, a worker pool, a Ray node the run started do the run's
    work: counted as another's, the tracking service starting beside a sweep's first job made an idle
    machine look busy, and each fit kept one CPU of two."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system + _descendants_seconds()


def _descendants_seconds() -> float:
    """CPU seconds of this process's live descendants, each with the children it waited for (Linux's
    /proc/<pid>/stat: utime, stime, cutime, cstime); 0 where /proc cannot tell."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return 0.0
    total, seen, pending = 0.0, set(), _children(os.getpid())
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # field 3 on, counted after the name
            total += sum(float(v) for v in fields[11:15]) / tick  # fields 14 to 17
        except (OSError, ValueError, IndexError):  # it ended meanwhile
            continue
        pending.extend(_children(pid))
    return total


def _children(pid: int) -> list[int]:
    found = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as f:
                found.extend(int(child) for child in f.read().split())
        except (OSError, ValueError):
            continue
    return found


def _machine_busy_seconds() -> Optional[float]:
    try:
        with open("/proc/stat") as f:
            fields = [float(v) for v in f.readline().split()[1:9]]
        user, nice, system, _idle, _iowait, irq, softirq, steal = fields
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None


def start_up_cpu_share() -> float:
    """The share of one CPU the main thread had from the run's start to the first call (its start-up:
    the interpreter, imports, composition, the table's read, the plan), the same value after: about 0.9
    on an idle machine, a quarter with four runnable threads per CPU. The load average lags by a minute;
    this is the run's own. From `LEAST_SHARE` to 1 (waits on disks and locks count as a busy machine)."""
    global _share
    if _share is None:
        _share = cpu_share_so_far()
    return _share


def cpu_share_so_far() -> float:
    """The share of one CPU the main thread has had since the run started, as `start_up_cpu_share`
    measures it, now (not kept): what a choice made before the plan can read."""
    wall = time.time() - (_wall_at_start if _runs else process_started())
    cpu = time.thread_time() - _thread_at_start
    return min(1.0, max(LEAST_SHARE, cpu / wall)) if wall > 0 else 1.0
