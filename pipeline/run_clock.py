"""When a run started, for `time_limit_s`: the process's own start for its first run (the interpreter,
imports and Hydra's composition count, as a user waits for them), the call for a later one (the next
job of a sweep run in the same process)."""

from __future__ import annotations

import os
import time

_runs = 0


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
    global _runs
    _runs += 1
    return process_started() if _runs == 1 else time.time()
