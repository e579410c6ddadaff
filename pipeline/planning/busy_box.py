"""Fits on a machine other processes keep busy: each fit's threads are capped at the CPUs the others leave.

LightGBM's, XGBoost's and torch's worker threads spin while they wait for a partner thread, and a thread
the kernel has descheduled for another process's keeps its partners spinning: on the 2-core box beside two
busy loops, `python -m pipeline tracking=none` took 77.7 s with each fit on both CPUs, and 25.2 s capped
here at one CPU a fit, two at once (13.4 s alone either way; beside one busy loop 40 to 50 s against 15.2
to 15.5 s). Where the user left the fits' CPUs to the engine, the run measures the others' load over its
start-up and derives no fit above the CPUs left; while it fits, each fit's start reads the load again
(`ThreadCap`), so that others who began after the plan cap the threads of the fits that follow."""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Optional

from pipeline.config import LOCAL_EXECUTOR
from pipeline.settings import Settings

# A fit's threads wait for CPUs others hold: on the 2-core box a 20-round LightGBM fit on 800 rows took 0.02 s
# with two threads and 0.03 s with one idle, 0.05 s and 0.03 s beside one other busy process, 0.13-0.54 s and
# 0.06 s beside three. The machine counts as busy from half a CPU of others' work over the start-up, or,
# where that cannot be measured, below this share of a CPU for the run's main thread (about 0.9 idle and
# beside one busy process, 0.47 beside three)
OTHERS_BUSY_FROM = 0.5
BUSY_BELOW = 0.75


def cap_threads_on_busy_box(settings: Settings) -> Settings:
    """`settings` with `levels.fit_cpus_most` set where the machine is busy: the fits run here (the local
    executor, not in the driver alone) on the whole detected machine (no declared hardware, no launcher's
    slot or SLURM job, which share it out themselves); said on the terminal. Unchanged otherwise. The cap
    holds only the fits whose CPUs the engine derives: `parallelism.fit.num_cpus` or a model's own
    `resources.num_cpus` keeps them as set."""
    from pipeline import hardware

    if not _engine_sizes_fits(settings) or settings.conf.executor.in_process == "always":
        return settings
    total_cpus = hardware.affinity_cpus()
    load = machine_load() if total_cpus > 1 else None
    most = load.free_cpus(total_cpus) if load else total_cpus
    if most >= total_cpus:
        return settings
    from pipeline import report

    report.console.print(
        f"the machine is busy ({load.why}): each fit whose CPUs are left to the engine takes at most "
        f"{most} of its {total_cpus} CPUs, several fits at once where the plan has them, since threads "
        "waiting for a CPU others hold slow a fit several times over (parallelism.fit.num_cpus sets them)",
        highlight=False)
    return dataclasses.replace(settings, levels=dataclasses.replace(settings.levels, fit_cpus_most=most))


def _engine_sizes_fits(settings: Settings) -> bool:
    """Whether the engine sizes the fits on this whole machine: the local executor, no declared hardware,
    no launcher's slot or SLURM job (they share the machine out themselves), no `parallelism.fit.num_cpus`."""
    from pipeline import hardware

    conf = settings.conf
    return not (conf.hardware is not None or settings.levels.fit.num_cpus is not None
                or conf.executor._target_ != LOCAL_EXECUTOR or os.environ.get(hardware.SLOT_CPUS_ENV)
                or hardware.slurm_cpus_per_task() is not None)


def thread_cap(settings: Settings) -> Optional["ThreadCap"]:
    """A `ThreadCap` for the run's fits where the engine sizes them (`_engine_sizes_fits`) on more than one
    CPU; None otherwise."""
    from pipeline import hardware

    total_cpus = hardware.affinity_cpus()
    if total_cpus < 2 or not _engine_sizes_fits(settings):
        return None
    sized = frozenset(s.name for s in settings.models if s.resources.num_cpus is None)
    return ThreadCap(total_cpus, sized) if sized else None


class ThreadCap:
    """The load read again while the run fits: a fit that starts while other processes keep
    `OTHERS_BUSY_FROM` CPUs or more busy, over the last `WINDOW_S` or more, gets at most the CPUs they leave
    as its threads (its place in the plan, and so the fits at once, stay as planned); said when that
    begins and ends. The plan itself follows the start-up's reading (`cap_threads_on_busy_box`). Only the
    fits of `models`, whose CPUs the engine derives."""

    WINDOW_S = 2.0  # /proc/stat counts clock ticks; a fit's start reads the load since the last reading

    def __init__(self, total_cpus: int, models: frozenset):
        from pipeline.run_clock import machine_reading

        self.total_cpus, self.models = total_cpus, models
        self._since, self._most = machine_reading(), total_cpus

    def threads(self, model: str, num_cpus: int) -> int:
        """The threads a fit of `model` planned with `num_cpus` CPUs starts with now."""
        if model not in self.models:
            return num_cpus
        self._read()
        return min(num_cpus, self._most)

    def _read(self) -> None:
        from pipeline.run_clock import machine_reading, others_between

        if self._since is not None and time.time() - self._since[0] < self.WINDOW_S:
            return  # no /proc to walk at each fit's start: the last reading holds
        now = machine_reading()
        if now is None or self._since is None:
            self._since = self._since or now
            return
        wall, others, self._since = now[0] - self._since[0], others_between(self._since, now), now
        busy = others >= OTHERS_BUSY_FROM
        most = Load(others, 1.0, "").free_cpus(self.total_cpus) if busy else self.total_cpus
        if most == self._most:
            return
        from pipeline import report

        load = f"other processes kept {others:.1f} CPUs busy over the last {wall:.1f} s"
        report.console.print(
            f"the machine got busy while the run fitted ({load}): fits starting from now take at most {most} "
            f"of the {self.total_cpus} CPUs as threads" if most < self._most else
            f"the machine is less busy ({load}): fits starting from now take up to {most} of the "
            f"{self.total_cpus} CPUs the plan gave them as threads", highlight=False)
        self._most = most


def busy_machine() -> Optional[str]:
    """Why this machine counts as busy while the run started, or None where it does not (`machine_load`)."""
    load = machine_load()
    return load.why if load else None


@dataclasses.dataclass(frozen=True)
class Load:
    """What others leave a run on a busy machine: their CPUs' worth of work over its start-up (None where
    /proc/stat cannot tell), the share of a CPU its main thread had, and the reason in words."""

    others: Optional[float]
    share: float
    why: str

    def free_cpus(self, total_cpus: int) -> int:
        """The CPUs the others leave: the total less their CPUs rounded up, or, where those cannot be
        measured, the start-up's share of a CPU times the total; at least one."""
        if self.others is not None:  # /proc/stat counts every CPU of the machine, this process's or not
            return max(1, min(total_cpus, (os.cpu_count() or total_cpus) - math.ceil(self.others)))
        return max(1, math.floor(total_cpus * self.share))


def machine_load() -> Optional[Load]:
    """The machine's load while the run started where it counts as busy, else None: other processes kept
    `OTHERS_BUSY_FROM` CPUs or more busy (pipeline.run_clock.others_busy_cpus), or, where that cannot be
    told, the run's main thread had less than `BUSY_BELOW` of a CPU (more runnable threads than CPUs)."""
    from pipeline.run_clock import cpu_share_so_far, others_busy_cpus

    others = others_busy_cpus()
    if others is not None:
        why = f"other processes kept {others:.1f} CPUs busy while this run started"
        return Load(others, 1.0, why) if others >= OTHERS_BUSY_FROM else None
    share = cpu_share_so_far()
    return Load(None, share, f"this run's start-up had {share:.2f} of a CPU") if share < BUSY_BELOW else None
