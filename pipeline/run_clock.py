"""When a run started, for `time_limit_s`: the process's own start for its first run (the interpreter,
imports and Hydra's composition count, as a user waits for them), the call for a later one (the next
job of a sweep run in the same process)."""

from __future__ import annotations

import os
import time

_runs = 0


def process_started() -> float:
    """time.time() the operating system started this process (Linux's /proc: boot time plus the
    process's start in clock ticks, psutil's way without importing it); elsewhere, now."""
    try:
        with open("/proc/stat") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith("btime"))
        with open("/proc/self/stat") as f:
            ticks = float(f.read().rsplit(")", 1)[1].split()[19])  # field 22, counted after the name
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, ValueError, IndexError):
        return time.time()


def run_started() -> float:
    global _runs
    _runs += 1
    return process_started() if _runs == 1 else time.time()
