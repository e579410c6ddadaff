"""The run's time budget: a deadline the scheduler plans to, and what it cut.

`time_limit_s` bounds the whole run, from the process's start to its last line, as AutoGluon's
`time_limit` does: start-up (config, plan, data, workers or Ray) spends it too, and the fits' deadline
is the limit less what the run's tail needs after the last fit (`reserved`: the refits, the ensemble,
models saved and logged, estimated from measured costs, pipeline.graph.tail) and less the grace a fit
has to stop. `fit_time_limit_s` is the narrower budget: seconds for the fits alone, from the first
one's start; the tail comes after it. Either deadline is an absolute `time.time()`, so every worker
process and Ray node reads the same instant.

- `TimeBudget` estimates how long a fit takes, from the fits of the same model that finished
  (mean per fold; a fit stopped early gives a floor); a model with none finished starts. A better
  estimate (the device choice's cost model) plugs in as `prior`, one function of the task. It says
  whether a trial's remaining fits, laid on the places (CPUs) that free when, end by the deadline.
- `GraphCut` (pipeline.graph.graph_cut) is the cut over any plan's tasks and its spread.
- `BudgetSummary` says what the budget cut, for the terminal, MLflow and the run directory.
"""

from __future__ import annotations

import heapq
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any, Callable, Optional, Sequence

from pipeline.errors import TimeLimitError
from pipeline.graph.graph_cut import GraphCut, reads_best_trial  # noqa: F401  (importable from here)

FitEstimate = Callable[[Any], Optional[float]]  # a task -> the seconds one fit of it takes; None: unknown


# with stacking, how many of a model's last whole level-1 fits price its stacked fits beside its best trial's
RECENT_FITS = 5


def no_estimate(task) -> Optional[float]:
    """The prior without a cost model: nothing is known before a model's first fit finishes."""
    return None


def stop_grace_s(limit_s: float) -> float:
    """How long past the deadline a fit may take to stop at its next round or epoch and predict its
    rows before its worker is stopped (a model with no stop callback)."""
    return max(10.0, 0.1 * limit_s)


def run_grace_s(limit_s: float) -> float:
    """The stop grace under a whole-run limit: short, and kept back from the fits' time."""
    return max(1.0, 0.03 * limit_s)


LEAST_REFIT_SHARE = 0.05  # a refit still loads its rows and builds its data set, however few its rounds


def _level(task) -> Optional[int]:
    return getattr(task, "level", None)


def _refit_share(result) -> float:
    """The share of a fold fit's work its model's refit does (TabularModel.refit_share), at least
    `LEAST_REFIT_SHARE`; 1 where the result holds no model that says."""
    share = getattr(getattr(result, "model", None), "refit_share", None)
    try:
        return min(1.0, max(LEAST_REFIT_SHARE, float(share()))) if callable(share) else 1.0
    except Exception:  # noqa: BLE001 - a share it cannot tell prices the refit at a whole fold fit
        return 1.0


class TimeBudget:
    """The deadline, and the fit-time estimates that decide whether a fit may still start."""

    def __init__(self, limit_s: float, *, start: Optional[float] = None, prior: FitEstimate = no_estimate,
                 clock: Callable[[], float] = time.time, whole_run: bool = False,
                 tail: Optional[Callable[[], float]] = None, stacking=None):
        """`whole_run`: the limit runs from `start` (the process's start) and keeps `tail()` seconds
        back for what follows the fits; else it runs from `begin` (the first fit) and covers the fits.
        `stacking` (a graph.stack_reserve.StackReserve): the level-1 search ends early enough for it."""
        self.limit_s, self.prior, self.clock = float(limit_s), prior, clock
        self.stacking = stacking
        self.whole_run, self.tail = whole_run, tail or (lambda: 0.0)
        self.key = "time_limit_s" if whole_run else "fit_time_limit_s"
        self.start = self.clock() if start is None else start
        self.ready: Optional[float] = None  # when the run was ready to fit (begin), as a time.time()
        self._complete: dict[tuple, list[float]] = defaultdict(list)  # (model, level) -> seconds of whole fits
        self._stopped: dict[tuple, list[float]] = defaultdict(list)  # ... of fits stopped early: floors
        self._bytes: dict[str, int] = {}  # model -> its first fitted fold model's pickled size
        self._trial_fits: dict[tuple, list[float]] = defaultdict(list)  # (model, trial) -> its level-1 fits'
        self._best: dict[str, tuple] = {}  # model -> (score, trial) of its best level-1 trial so far
        # (model, trial) -> its level-1 fits' seconds times the share of each a refit does (refit_share)
        self._refit_work: dict[tuple, list[float]] = defaultdict(list)
        self._recent: dict[str, deque] = {}  # model -> seconds of its last RECENT_FITS whole level-1 fits

    def begin(self, start: Optional[float] = None) -> float:
        """The fits start: for a fits-only budget the clock starts now (or at `start`); the deadline."""
        self.ready = self.clock() if start is None else start
        if not self.whole_run:
            self.start = self.ready
        return self.deadline

    @property
    def grace(self) -> float:
        return run_grace_s(self.limit_s) if self.whole_run else stop_grace_s(self.limit_s)

    @property
    def refits_kept(self) -> bool:
        """Whether the tail keeps time for refit fits (refit=true under a whole-run limit)."""
        return self.whole_run and bool(getattr(self.tail, "refit", False))

    @property
    def reserved(self) -> float:
        """Seconds of a whole-run limit kept back from the fits: the tail's estimate and the stop grace, and
        with refits a second grace: theirs start once the fits have stopped, and may need one to stop too."""
        if not self.whole_run:
            return 0.0
        return self.tail() + self.grace * (2 if self.refits_kept else 1)

    @property
    def deadline(self) -> float:
        """When the fits must end, as a time.time() (it moves as the tail's estimate does)."""
        return self.start + self.limit_s - self.reserved

    def deadline_for(self, task) -> float:
        """When `task` must end: a refit fit (refit=true: a model's best trial on every row) in the time the
        tail keeps for the refits, which starts once the fits had their grace to stop (a refit depends on
        every trial of its model, the last of which may stop at the deadline); with stacking, a level-1
        trial after the first early enough for the stacked fits; any other fit by the fits' deadline."""
        if self.refits_kept and getattr(task, "fold_set", None) == ():
            return self.deadline + self.grace + self.tail.refit_seconds()
        if self.stacking is not None and self.stacking.holds(task):
            return self.deadline - self.stacked_seconds()
        return self.deadline

    def stacked_seconds(self) -> float:
        """With stacking, what the level-1 search leaves for the stacked fits (graph.stack_reserve), and a
        short grace: the stacked fits start once the last level-1 fits have stopped at their deadline and
        predicted (a search that left them the estimate alone lost level 2 on a loaded box)."""
        seconds = self.stacking.seconds(self.stacked_estimate) if self.stacking is not None else 0.0
        return seconds + run_grace_s(self.limit_s) if seconds else 0.0

    def record(self, task, seconds: float, stopped: bool = False, result=None) -> None:
        """A finished fit of `task`'s model took `seconds` (`stopped`: it was cut short); the first `result`
        of each model with a fitted model is weighed as a save will pickle it (what the tail writes)."""
        (self._stopped if stopped else self._complete)[(task.model, _level(task))].append(seconds)
        if (not stopped and _level(task) in (None, 1) and getattr(task, "fold_set", None) is None
                and getattr(task, "trial", None) is not None):  # a trial's fold, not a stacked fit or refit
            self._trial_fits[(task.model, task.trial)].append(seconds)
            self._recent.setdefault(task.model, deque(maxlen=RECENT_FITS)).append(seconds)
            self._refit_work[(task.model, task.trial)].append(seconds * _refit_share(result))
        fitted = getattr(result, "model", None)
        if fitted is not None and task.model not in self._bytes:
            import pickle

            try:
                self._bytes[task.model] = len(pickle.dumps(fitted, protocol=pickle.HIGHEST_PROTOCOL))
            except Exception:  # noqa: BLE001 - a model that does not pickle fails its save, not the budget
                self._bytes[task.model] = 0

    def scored(self, result, metric) -> None:
        """A driver node's `result`; a level-1 trial's (graph.nodes.context.TrialResult) that scores better
        than its model's best so far becomes the one its stacked fits and refit will read."""
        if getattr(result, "level", None) != 1 or getattr(result, "pruned", True):
            return
        best = self._best.get(result.model)
        if best is None or best[0] != best[0] or metric.better(result.score, best[0]):  # any beats a NaN
            self._best[result.model] = (result.score, result.trial)

    def best_estimate(self, model: str) -> Optional[float]:
        """Seconds one fit of `model`'s best level-1 trial so far takes, or its mean fit where that is longer
        (a trial's few fits are a noisy reading): the stacked levels and the refit fit those params, and
        the best of a search is often one of its slower trials (more leaves, more rounds)."""
        mean = self.model_estimate(model)
        best = self._best.get(model)
        own = self._trial_fits.get((model, best[1])) if best is not None else None
        return max(mean or 0.0, fmean(own)) if own else mean

    def refit_estimate(self, model: str) -> Optional[float]:
        """Seconds of one fold fit of `model`'s best trial that its refit does again, on more rows: the rounds
        (epochs, trees) the folds stopped at, not the patience they ran past them (`refit_share`); None
        while the model has no complete trial (one withdrawn after its first folds has none to refit)."""
        best = self._best.get(model)
        own = self._refit_work.get((model, best[1])) if best is not None else None
        return fmean(own) if own else None

    def stacked_estimate(self, model: str) -> Optional[float]:
        """Seconds a stacked fit of `model` is priced from (times stack_reserve.LEVEL_COST): its best trial's
        fits (`best_estimate`), or the mean of its last `RECENT_FITS` whole level-1 fits where that is longer.
        A box loaded late in the run slows the stacked fits as it slowed those, and a search moving to slower
        params ends on them: a 20-s run beside another process fitted its last level-1 trials at 0.3-0.6 s a
        fit against a mean of 0.15, its stacked fits took 0.23-0.56 s, and level 2 was left out."""
        best = self.best_estimate(model)
        recent = self._recent.get(model)
        return max(best or 0.0, fmean(recent)) if recent else best

    def model_bytes(self, model: str) -> Optional[int]:
        """The pickled size of one fitted fold model of `model`, once one has ended; None before."""
        return self._bytes.get(model)

    def estimate(self, task) -> Optional[float]:
        """Seconds one fit of `task` takes: the mean of the model's complete fits at its level, else
        at any level, else the longest of its stopped fits (it took at least that), else the prior."""
        if getattr(task, "fold_set", None) == () and (refit := self.refit_estimate(task.model)) is not None:
            return refit  # a refit fit: its best trial's, at the refit's length
        key = (task.model, _level(task))
        if self._complete.get(key):
            return fmean(self._complete[key])
        same_model = [s for (m, _), seconds in self._complete.items() if m == task.model for s in seconds]
        if same_model:
            return fmean(same_model)
        floors = [s for (m, _), seconds in self._stopped.items() if m == task.model for s in seconds]
        return max(floors) if floors else self.prior(task)

    def model_estimate(self, model: str) -> Optional[float]:
        """Seconds one fit of `model` takes at level 1, as `estimate` says it."""
        return self.estimate(_Probe(model, 1))

    def can_finish(self, task, fits: int = 1, slots: Sequence[float] = (), after: float = 0.0,
                   now: Optional[float] = None) -> bool:
        """Whether `fits` fits of `task`'s model end by the deadline, each started on the first of
        `slots` (the times, as the clock's, at which a place to run one frees; none: one place, free
        now) that is free, and the fits already running for the same result, ending at `after`, too.
        With no estimate, only whether the deadline is still ahead."""
        now = self.clock() if now is None else now
        seconds = self.estimate(task) or 0.0
        free = sorted(max(now, s) for s in slots) or [now]
        heapq.heapify(free)
        end = max(now, after)
        for _ in range(fits):
            start = heapq.heappop(free)
            end = max(end, start + seconds)
            heapq.heappush(free, start + seconds)
        return end < self.deadline_for(task)

    def remaining(self, now: Optional[float] = None) -> float:
        return self.deadline - (self.clock() if now is None else now)


@dataclass(frozen=True)
class _Probe:
    model: str
    level: int


@dataclass
class BudgetSummary:
    """What the budget cut in one run."""

    limit_s: float
    fits_ended_s: float  # the last fit's end, seconds after the budget's start
    trials: int
    trials_not_run: int  # no fold of theirs started
    trials_dropped: int  # some folds ran, not all: dropped, not scored
    fits: int
    fits_not_run: int
    fits_stopped: int  # stopped at the deadline by their round or epoch callback; kept as finished
    fits_cancelled: int = 0  # still running past the deadline's grace: their workers were stopped
    fits_abandoned: int = 0  # running when the rest of their trial was cut: stopped, their result unused
    other_cut: dict[str, int] = field(default_factory=dict)  # node kind -> how many were cut
    left_out: list[str] = field(default_factory=list)  # models without one complete trial
    key: str = "time_limit_s"  # the setting: time_limit_s (the whole run) or fit_time_limit_s (the fits)
    reserved_s: float = 0.0  # time_limit_s: what was kept back for the tail when the fits' deadline came
    trials_pruned: int = 0  # losing after some folds (successive halving over folds): the rest not started
    fits_held_to_share: int = 0  # of fits_stopped, first-trial fits stopped at their share (graph.first_trials)
    first_trials_partial: list[str] = field(default_factory=list)  # "<model>: k of n folds", bags kept short
    refits_not_run: list[str] = field(default_factory=list)  # refit=true: the models whose refit fit was cut
    stacked_s: float = 0.0  # with stacking: how long before the fits' deadline the level-1 search ended
    ready_s: Optional[float] = None  # time_limit_s: seconds from start-up until the run was ready to fit
    withdrawn: list[str] = field(default_factory=list)  # each kind withdrawn or failed and left out, and why

    @property
    def cut_anything(self) -> bool:
        return bool(self.trials_not_run or self.trials_dropped or self.fits_not_run or self.fits_stopped
                    or self.fits_cancelled or self.fits_abandoned or self.other_cut or self.left_out)

    @property
    def nothing_finished(self) -> bool:
        unfinished = self.trials_not_run + self.trials_dropped + self.trials_pruned + len(self.withdrawn)
        return self.trials > 0 and unfinished == self.trials

    def line(self) -> str:
        parts = [f"{self.trials_not_run} of {self.trials} trials not run"]
        if self.trials_dropped:
            parts.append(f"{self.trials_dropped} dropped unfinished (not all their folds ran)")
        if self.trials_pruned:
            parts.append(f"{self.trials_pruned} stopped as losing after their first folds")
        if self.first_trials_partial:
            parts.append("first trials kept with the folds that ended in time, scored on their held-out rows ("
                         + ", ".join(self.first_trials_partial) + ")")
        parts.append(f"{self.fits_not_run} of {self.fits} fits not started")
        parts.append(f"{self.fits_stopped} fit{'' if self.fits_stopped == 1 else 's'} stopped early")
        if self.fits_held_to_share:
            parts[-1] += (f" ({self.fits_held_to_share} of them first-trial fits at their share of the time, so "
                          "that every model's first trial could end)")
        if self.fits_cancelled:
            parts.append(f"{self.fits_cancelled} stopped past the deadline")
        if self.fits_abandoned:
            parts.append(f"{self.fits_abandoned} stopped when their trial could no longer finish")
        parts += [f"{n} {kind} node(s) not run" for kind, n in self.other_cut.items()]
        if self.refits_not_run:
            parts.append(f"no refit of {', '.join(self.refits_not_run)} (it could not end in the time kept "
                         "for the refits)")
        parts += self.withdrawn
        if self.left_out:
            parts.append("left out (no complete trial): " + ", ".join(self.left_out))
        since = "start-up" if self.key == "time_limit_s" else "the first fit's start"
        kept = [f"{self.reserved_s:.1f} s kept for the run's tail"] if self.key == "time_limit_s" else []
        if self.stacked_s:
            kept.append(f"the level-1 search ended {self.stacked_s:.1f} s before the fits' deadline, for the "
                        "stacked levels")
        return (f"{self.key}={self.limit_s:g} s: " + ", ".join(parts)
                + f"; the fits ended {self.fits_ended_s:.1f} s after {since}"
                + (f" ({'; '.join(kept)})" if kept else ""))

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"line": self.line()}


LEFT = ("withdrawn", "failed")  # a kind's cuts as it left the run (graph.withdrawal), said kind by kind


def summarize(budget: TimeBudget, cut: GraphCut, done: dict, timeline: list[dict], cancelled: int = 0,
              abandoned: int = 0, held_to_share: int = 0, withdrawn: Sequence[str] = ()) -> BudgetSummary:
    """The summary of a finished graph: `done` holds each task's result by id, `timeline` the fits'; the
    trials never made (the search ended first: `TrialSupply.dropped`) count as trials and fits not run."""
    unmade = sum(cut.supply.dropped.values()) if cut.supply is not None else 0
    unmade_fits = cut.supply.dropped_fits if cut.supply is not None else 0
    tasks = list(cut.tasks.values())
    fits = [t for t in tasks if t.kind == "fit"]
    bags = [t for t in tasks if t.kind == "bag"]
    pruned = sum(cut.cut.get(b.id) == "pruned" for b in bags)
    cut_bags = [b for b in bags if b.id in cut.cut and cut.cut[b.id] != "pruned"]
    # a withdrawn kind's first trial, its lead fold fitted, is neither run nor dropped: `withdrawn` says it,
    # as it says a kind left out after a failed fit
    begun = [b for b in cut_bags if any(d in cut.started for d in b.depends_on)]
    judged = sum(cut.cut[b.id] in LEFT for b in begun)
    dropped = len(begun) - judged
    other: dict[str, int] = defaultdict(int)
    for t in tasks:
        if t.id in cut.cut and t.kind not in ("fit", "bag"):
            other[t.kind] += 1
    levels = {_level(t) for t in bags}
    names = lambda b: b.model if len(levels) <= 1 else f"{b.model} (level {_level(b)})"  # noqa: E731
    finished = {names(b) for b in bags if b.id in done}
    gone = {names(b) for b in bags if cut.cut.get(b.id) in LEFT}  # said by `withdrawn`
    partial = [_partial(names(b), b, done) for b in bags if b.id in done]
    partial = [p for p in partial if p]
    ends = [e["end"] for e in timeline if not e.get("cached")]
    # a refit the time could not hold (not one whose level was left out)
    refits = [names(f) for f in fits if f.fold_set == () and cut.cut.get(f.id) == "budget"]
    return BudgetSummary(
        limit_s=budget.limit_s,
        fits_ended_s=max(ends, default=budget.start) - budget.start,
        trials=len(bags) + unmade, trials_not_run=len(cut_bags) - dropped - judged + unmade,
        trials_dropped=dropped,
        fits=len(fits) + unmade_fits,
        fits_not_run=sum(f.id in cut.cut and f.id not in cut.started for f in fits) + unmade_fits,
        fits_stopped=sum(bool(e.get("stopped_by_budget")) for e in timeline), fits_cancelled=cancelled,
        fits_abandoned=abandoned, fits_held_to_share=held_to_share,
        other_cut=dict(other), withdrawn=list(withdrawn),
        left_out=[n for n in dict.fromkeys(map(names, bags)) if n not in finished and n not in gone],
        key=budget.key, reserved_s=budget.reserved, trials_pruned=pruned, first_trials_partial=partial,
        refits_not_run=refits, stacked_s=budget.stacked_seconds(),
        ready_s=budget.ready - budget.start if budget.whole_run and budget.ready is not None else None,
    )


def _partial(name: str, bag, done: dict) -> str:
    """`<model>: k of n folds` for a finished bag kept with fewer folds than it has (those that ended, less
    any the budget stopped far short: graph.stopped_folds), else ''."""
    ended = sum(d in done for d in bag.depends_on)
    folds = getattr(done[bag.id], "folds", None)
    kept = len(folds) if folds is not None else ended
    if kept == len(bag.depends_on):
        return ""
    short = f", {ended - kept} stopped far short left out" if kept < ended else ""
    return f"{name}: {kept} of {len(bag.depends_on)} folds{short}"


def check_finished(summary: BudgetSummary) -> None:
    """When nothing finished within the limit, a TimeLimitError saying to raise it (the summary itself is
    said, kept and logged by the run's hooks: `on_time_budget`)."""
    if summary.nothing_finished:
        raise TimeLimitError(
            f"{summary.key}={summary.limit_s:g}: no model finished a complete trial (every fold of it) within the "
            f"limit, so there is no leaderboard{_fits_window(summary)}; raise {summary.key} (or fit less: "
            "fewer folds, a smaller model)"
        )


def _fits_window(summary: BudgetSummary) -> str:
    """Under a whole-run limit, the time the fits had: from when the run was ready to fit (start-up: the
    interpreter, the table, the model libraries' imports) to the deadline, which keeps the tail's time."""
    if summary.ready_s is None:
        return ""
    ready, kept = summary.ready_s, summary.reserved_s
    fits = max(0.0, summary.limit_s - kept - ready)
    return (f": the run was ready to fit {ready:.1f} s after start-up (the interpreter, the table and the "
            f"model libraries' imports) and kept {kept:.1f} s for its tail, which left the fits "
            f"{fits:.1f} s: on this machine a limit under {ready + kept:.1f} s leaves the fits no time")
