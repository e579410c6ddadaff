"""How many folds of a bag to fit at once, when the user left the fit's CPUs to the engine.

Running p folds at once gives each fit bag_cpus // p threads and costs the start of worker
processes; running them one after another gives each fit every thread, in the driver. A fit's
threads do not scale perfectly (Amdahl: a share of each fit stays serial), so parallel folds
win when there are many folds per CPU and lose when a last, half-empty wave or the workers'
start eat the gain. The estimate, in units of one single-threaded fit:

    one after another:  k x t(C)                 t(c) = s + (1 - s) / c
    p at once:          ceil(k / p) x t(C // p) + worker start

Beside other models whose folds already run at once (`alongside`), the workers are started for them
and a last, partial wave's idle CPUs go to their fits: p at once costs k / p x t(C // p).

The most folds at once that is estimated fastest wins; the reason is written into the plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SERIAL_SHARE = 0.3  # of a GBM fit on tabular data, at a few threads per fit (a model's own: thread_serial_share)
WORKER_START = 0.5  # starting the workers (fork, library import, data hand-over), in one-thread fits


_SHARED = ", beside the other models' parallel folds: no worker start, and their fits take a partial wave's CPUs"


@dataclass(frozen=True)
class FoldsAtOnce:
    folds_parallel: int
    fit_cpus: int
    reason: str


def fit_time(cpus: int, serial: float = SERIAL_SHARE) -> float:
    """A fit's time with `cpus` threads, relative to one thread."""
    return serial + (1 - serial) / cpus


def estimate(num_folds: int, bag_cpus: int, at_once: int, serial: float = SERIAL_SHARE,
             alongside: bool = False) -> float:
    """Estimated time of the bag with `at_once` folds running together (beside other models' parallel
    folds when `alongside`)."""
    rounds = num_folds / at_once if alongside else math.ceil(num_folds / at_once)
    start = WORKER_START if at_once > 1 and not alongside else 0.0
    return rounds * fit_time(max(1, bag_cpus // at_once), serial) + start


def folds_at_once(num_folds: int, bag_cpus: int, serial: float = SERIAL_SHARE,
                  alongside: bool = False) -> FoldsAtOnce:
    """The number of folds to run together (and each fit's CPUs) that the estimate says is fastest, for a
    model whose fits keep `serial` of their one-thread time however many threads they get; `alongside`:
    other models of the run already fit several folds at once on the CPUs."""
    if num_folds < 2 or bag_cpus < 2:
        return FoldsAtOnce(1, max(1, bag_cpus), "")
    choices = range(1, min(num_folds, bag_cpus) + 1)
    times = {p: estimate(num_folds, bag_cpus, p, serial, alongside) for p in choices}
    best = min(choices, key=lambda p: (round(times[p], 6), -p))
    seq, basis = times[1], _SHARED if alongside else ", worker start included"
    if best == 1:
        par = min(choices[1:], key=lambda p: times[p])
        reason = (f"{num_folds} folds on {bag_cpus} CPUs: one at a time with {bag_cpus} threads each "
                  f"(est. {seq:.2f} one-thread fits) beats {par} at once with {bag_cpus // par} "
                  f"(est. {times[par]:.2f}{basis})")
    else:
        reason = (f"{num_folds} folds on {bag_cpus} CPUs: {best} at once with {bag_cpus // best} thread(s) each "
                  f"(est. {times[best]:.2f} one-thread fits{basis}) beats one at a time with {bag_cpus} "
                  f"(est. {seq:.2f})")
    return FoldsAtOnce(best, max(1, bag_cpus // best), reason)
