"""Estimated seconds of one fit per library, learner and device, from measured fits.

Each model kind's calibration is data committed beside its adapter (its profile's `costs`, a YAML file
such as pipeline/models/xgboost_costs.yaml), each number with where it came from. A
learner's estimate is piecewise linear in the fit's work (rows x features x rounds for GBMs, rows x
epochs for the network) through the origin and its measured points, proportional beyond the largest
point, plus the device's start for a GPU learner; a CPU learner's figure is scaled from the threads
it was measured with to the fit's by Amdahl's law (pipeline.planning.payoff.fit_time).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pipeline.planning.payoff import fit_time

@dataclass(frozen=True)
class Learner:
    """One library's learner on one device, as measured."""

    key: str  # "xgboost/cuda"
    device: str  # cpu | cuda
    points: tuple[tuple[float, float], ...]  # (work, seconds), increasing work
    threads: Optional[int] = None  # CPU learners: the threads the points were measured with
    start_s: float = 0.0  # a GPU learner's start in a fitting process

    def seconds(self, work: float, threads: int = 1, serial: float = 0.3) -> float:
        """Estimated seconds of a fit of `work`, with `threads` CPU threads (CPU learners)."""
        base = _interpolate(self.points, work) + self.start_s
        if self.device == "cpu" and self.threads:
            base *= fit_time(max(1, threads), serial) / fit_time(self.threads, serial)
        return base


def _interpolate(points: tuple[tuple[float, float], ...], work: float) -> float:
    work = max(0.0, work)
    previous = (0.0, 0.0)
    for point in points:
        if work <= point[0]:
            (w0, t0), (w1, t1) = previous, point
            return t0 + (t1 - t0) * (work - w0) / (w1 - w0)
        previous = point
    last_work, last_seconds = points[-1]
    return last_seconds * work / last_work


# Packed fits share a device's memory and each one's failures; they are planned only for a gain that one
# measurement's noise would not make (repeats of either side spread by up to 10% on the H100 box).
MIN_PACKING_GAIN = 1.1


@dataclass(frozen=True)
class Calibration:
    learners: dict[str, Learner]
    packing: dict[str, float]  # library -> measured speed-up of packed fits over one after the other
    packing_sources: dict[str, str]

    def learner(self, key: str) -> Optional[Learner]:
        return self.learners.get(key)

    def packing_pays(self, library: str) -> tuple[bool, str]:
        """Whether fractional GPU fits of `library` may share a device (not measured, or measured to gain at
        least MIN_PACKING_GAIN), and, where not, why."""
        speed_up = self.packing.get(library)
        if speed_up is None or speed_up >= MIN_PACKING_GAIN:
            return True, ""
        why = ("" if speed_up < 1
               else f", under the {MIN_PACKING_GAIN:.2f}x that would tell a gain from a repeat's spread")
        return False, (f"GPU fits not packed: two 0.5-GPU {library} fits on one device ran at {speed_up:.2f}x the "
                       f"speed of one after the other ({self.packing_sources.get(library, 'measured')}){why}; "
                       "each fit gets a whole device")


def load(path: Path) -> Calibration:
    """A calibration file: `learners` (key -> device, points[, threads, start_s]) and `packing`."""
    import yaml

    raw = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # C: a tenth of the time
    learners = {
        key: Learner(key, str(entry["device"]), tuple((float(w), float(s)) for w, s in entry["points"]),
                     entry.get("threads"), float(entry.get("start_s", 0.0)))
        for key, entry in (raw.get("learners") or {}).items()
    }
    packing = {lib: float(entry["speed_up"]) for lib, entry in (raw.get("packing") or {}).items()}
    sources = {lib: str(entry.get("source", "")) for lib, entry in (raw.get("packing") or {}).items()}
    return Calibration(learners, packing, sources)
