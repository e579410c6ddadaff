"""What a run does after its last fit, in seconds: the part of a whole-run time limit
(`time_limit_s`, pipeline.graph.time_budget) kept back from the fits.

The tail: with refit=true each model's best trial fitted once more on every row (a fit of the model
on num_folds / (num_folds - 1) times its fold's rows: its measured fit time scaled so, on the places
the CPUs give); the ensemble's weights; each model's predictor, the leaderboard and the run's files
written; with tracking, the MLflow run logged; the workers stopped (none where the fits ran in the
driver) and the process's exit. The costs other than the refits are the figures measured on the 2-core
box under a load of 7 to 10 (about a quarter of a CPU for each runnable thread), per run and per model:
the bound. What a run reserves of it is scaled by how much of a CPU its own start-up had
(pipeline.run_clock.start_up_cpu_share), so an idle machine keeps less and a busy one more:
`SAFETY` x the share of the bound the tail takes with a whole CPU / the start-up's share, at least
`FLOOR` and at most the whole bound (or the largest share measured, where a run like it took more).
That share is `BOUND_CPU_SHARE` until runs like this one have measured theirs: each run that ends under
`time_limit_s` keeps the tail it took, as a share of the bound times its start-up's CPU share, in the
engine's private cache (pipeline.models.native), per host, executor kind, tracking and the table's size
(the decade of its cells: the tail writes and scores every row); the next run like it takes the largest
of the last `KEEP`.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Callable, Optional

WRITE_S = 0.8  # the ensemble's weights, leaderboard, timeline, memory and state files
PER_MODEL_S = 0.3  # a model's predictor saved (its fold models pickled) and its leaderboard row
TRACKING_S = 3.0  # MLflow: the run's params, metrics and artifacts, and the ensemble logged as a model
EXIT_S = 1.5  # the workers stopped (a Ray connection closed), the interpreter's exit
IN_DRIVER_EXIT_S = 0.3  # the interpreter's exit where the fits ran in the driver: no worker to stop
# a predictor's megabyte pickled and written to the run folder; with tracking twice more (those bytes sent to
# the tracking service, which writes them into the store). Measured on the 2-core box: a
# forest's 121 MB predictor pickled in 0.11 s and written (synced) in 0.40 s, 0.0042 s a MB
SAVE_S_PER_MB = 0.005
KEEP, SAFETY, FLOOR = 8, 1.5, 0.25  # the measured shares kept; the margin on their largest; the least share
# the share of the bound a tail takes with a whole CPU, before any is measured here: the bound was measured at
# about a quarter of a CPU; measured idle since, the tails in the driver took 0.10-0.30, with workers 0.59-0.73
BOUND_CPU_SHARE = 0.4
CACHE_KIND = "tail"
RECORD = "shares_at_whole_cpu"  # the cache's key (runs before the CPU share kept "shares", not comparable)


@dataclass(frozen=True)
class TailEstimate:
    """The tail's seconds for the run's models: (name, num_folds, CPUs per fit) each."""

    models: tuple[tuple[str, int, int], ...]
    cpus: int
    refit: bool = False
    tracking: bool = False
    fit_seconds: Callable[[str], Optional[float]] = lambda model: None  # a model's measured seconds per fit
    saved_bytes: Callable[[str], Optional[int]] = lambda model: None  # a fold model's pickled size, measured
    workers: bool = True  # False: the fits run in the driver (executor.in_process=always)
    share: float = 1.0  # of the fixed costs, from the tails measured here (`reserved_share`)
    size: str = "unknown"  # the table's cells (rows x features) to the decade: "1e6"; "unknown" before loading

    @property
    def fixed(self) -> float:
        """The tail's costs other than the refits, as measured on the 2-core box: the bound a share scales."""
        exit_s = EXIT_S if self.workers else IN_DRIVER_EXIT_S
        fixed = WRITE_S + exit_s + PER_MODEL_S * len(self.models) + (TRACKING_S if self.tracking else 0.0)
        return fixed + self.saving_seconds

    @property
    def saving_seconds(self) -> float:
        """Writing the models' predictors (each fold model, measured once one has ended), and logging them
        with tracking: a forest's trees grown whole weigh tens of MB a fold, a GBM's a few."""
        mb = sum((self.saved_bytes(m) or 0) * folds for m, folds, _ in self.models) / 2**20
        return mb * SAVE_S_PER_MB * (3 if self.tracking else 1)

    @property
    def cache_name(self) -> str:
        kind = f"{'workers' if self.workers else 'driver'}-{'tracked' if self.tracking else 'untracked'}"
        return f"{socket.gethostname()}-{kind}-{self.size}.json"

    def __call__(self) -> float:
        return self.fixed * self.share + self.refit_seconds()

    def refit_seconds(self) -> float:
        """With refit=true, the refits' part: each model's fit on num_folds / (num_folds - 1) of its fold's
        rows, at its measured fit time, on the places the CPUs give."""
        if not self.refit:
            return 0.0
        refits = [(self.fit_seconds(m) or 0.0) * folds / max(1, folds - 1) for m, folds, _ in self.models]
        places = max(1, self.cpus // max(1, max((c for _, _, c in self.models), default=1)))
        return max(max(refits, default=0.0), sum(refits) / places)


def size_decade(rows: Optional[int], features: Optional[int]) -> str:
    if not rows:
        return "unknown"
    return f"1e{len(str(int(rows) * max(1, int(features or 1)))) - 1}"


def _shares(tail: TailEstimate) -> list[float]:
    from pipeline import private_cache

    kept = private_cache.read_json(CACHE_KIND, tail.cache_name)
    shares = kept.get(RECORD) if isinstance(kept, dict) else None
    if not isinstance(shares, list):
        return []
    return [float(x) for x in shares if isinstance(x, (int, float)) and x >= 0][-KEEP:]


def reserved_share(tail: TailEstimate, cpu_share: float) -> tuple[float, int]:
    """(the share of `tail.fixed` to reserve for a run whose start-up had `cpu_share` of a CPU, how many
    measured tails it comes from: 0 where none is kept yet and `BOUND_CPU_SHARE` stands in)."""
    shares = _shares(tail)
    at_whole_cpu = max(shares) if shares else BOUND_CPU_SHARE
    # at most the bound, unless a run like it took more (a tail past its bound: what it writes outgrew it)
    ceiling = max(1.0, at_whole_cpu)
    return min(ceiling, max(FLOOR, SAFETY * at_whole_cpu / max(cpu_share, 1e-3))), len(shares)


def keep_measured(tail: TailEstimate, took_s: float, cpu_share: float) -> None:
    """A run's tail took `took_s` (its last fit's end to its last line) after a start-up that had
    `cpu_share` of a CPU: kept as the share of the bound it would take with a whole CPU. Runs with refits
    are not kept (their tail is mostly the refits, estimated from their fits apart)."""
    if tail.refit or tail.fixed <= 0 or took_s < 0:
        return
    from pipeline import private_cache

    shares = (_shares(tail) + [round(took_s / tail.fixed * min(1.0, cpu_share), 4)])[-KEEP:]
    private_cache.keep_json(CACHE_KIND, tail.cache_name, {RECORD: shares})
