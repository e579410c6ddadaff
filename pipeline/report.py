"""What the user sees in the terminal: the plan, a progress display, the leaderboard (rich)."""

from __future__ import annotations

import os
import sys
from collections import Counter, defaultdict
from typing import Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.tree import Tree

from pipeline.memory.budget import gb
from pipeline.graph.nodes import node_kind
from pipeline.graph.plan import Plan
from pipeline.quantities import fmt


def _width():
    """Wide tables in logs and pipes too, where rich would otherwise assume 80 columns."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    return None if sys.stdout.isatty() else 120


console = Console(stderr=False, highlight=False, width=_width())
err_console = Console(stderr=True, highlight=False, width=_width())


def exit_with_error(error) -> None:
    """One `error:` line for a user's error (secrets masked, its brackets printed as written, not read as
    rich markup), then exit with the error's code: no traceback."""
    from rich.markup import escape

    from pipeline.redact import redact_text

    err_console.print(f"[bold red]error:[/bold red] {escape(redact_text(str(error)))}", soft_wrap=True)
    sys.exit(error.exit_code)

MAX_WAVES_SHOWN = 6


def plan_tree(plan: Plan) -> Tree:
    hw = plan.hardware
    devices = ", ".join(map(str, hw.devices)) or "none"
    title = f"[bold]Plan[/bold]: {hw.num_cpus} CPU, {fmt(hw.num_gpus)} GPU (devices {devices}; {hw.source})"
    if hw.planned_only:
        title += " [yellow](declared, larger than this machine: dry run only)[/yellow]"
    tree = Tree(title)
    if plan.memory is not None:
        tree.add(memory_line(plan.memory))
    by_model = defaultdict(list)
    for t in plan.fit_tasks:
        by_model[t.model].append(t)
    for a in plan.allocations:
        used = a.used
        node = tree.add(
            f"[bold cyan]{a.model}[/bold cyan]: fit {a.fit.num_cpus} CPU / {fmt(a.fit.num_gpus)} GPU; "
            f"{a.num_folds} fold(s), {a.folds_parallel} in parallel; {a.num_trials} trial(s), "
            f"{a.trials_parallel} in parallel; uses {used.num_cpus} CPU / {fmt(used.num_gpus)} GPU "
            f"({a.folds_parallel * a.trials_parallel} fits at once)"
        )
        if plan.unlisted(a.model):
            node.add(f"trials: the first {plan.listed[a.model]} of {a.num_trials} shown; every trial has their shape, "
                     f"the others follow round by round ({a.trials_parallel} at a time)")
        if a.device_reason:
            node.add(f"device {a.device_reason}")
        if a.packing_reason:
            node.add(f"[dim]{a.packing_reason}[/dim]")
        if a.parallel_reason:
            node.add(f"[dim]{a.parallel_reason}[/dim]")
        levels = level_counts(by_model[a.model])
        if len(levels) > 1 or any(t.fold_set == () for t in by_model[a.model]):
            node.add("levels: " + "; ".join(f"{level} ({text})" for level, text in levels.items()))
        if a.memory is not None:
            est, above = a.memory.estimate, a.memory.above
            gpu = f", {gb(est.gpu)} on each GPU" if a.fit.num_gpus > 0 and est.gpu else ""
            line = f"memory per fit: about {gb(est.ram)} RAM{gpu} (estimated)"
            if above is not None:  # stacked: the level below's outputs are columns too
                gpu = f", {gb(above.gpu)} on each GPU" if a.fit.num_gpus > 0 and above.gpu else ""
                line += f", {gb(above.ram)} RAM{gpu} above level 1"
            node.add(line)
            for note in a.memory.limited:
                node.add(f"[yellow]limited by memory[/yellow]: {note}")
        waves = defaultdict(list)
        for t in by_model[a.model]:
            waves[t.wave].append(t)
        more = plan.unlisted(a.model) * len(waves) // max(1, plan.listed.get(a.model, 1))  # the unlisted trials'
        for i, wave in enumerate(sorted(waves)):
            if i == MAX_WAVES_SHOWN:
                node.add(f"... {len(waves) - MAX_WAVES_SHOWN + more} more wave(s)")
                break
            cells = []
            for t in waves[wave]:
                where = ",".join(f"GPU{d}" + (f"x{fmt(s)}" if s < 1 else "") for d, s in zip(t.device_ids, t.gpu_shares))
                cells.append(fit_label(t) + (f"@{where}" if where else ""))
            node.add(f"wave {wave}: " + "  ".join(cells))
    kinds = by_kind(plan)
    graph = tree.add("[bold]graph[/bold]: " + " → ".join(
        f"{step} ×{count}" if count > 1 else step for step, count in graph_steps(plan)))
    for kind, tasks in kinds.items():
        graph.add(node_kind(kind).describe(tasks, plan))
    return tree


def fit_label(task) -> str:
    """A fit as the plan's waves show it: t0/f3 (trial, fold), l2/f3 (level, fold), l1/f0+3, l2/refit."""
    if task.fold_set is None:
        return f"t{task.trial}/f{task.fold}"
    return f"l{task.level}/" + ("f" + "+".join(map(str, task.fold_set)) if task.fold_set else "refit")


def level_counts(fits: list) -> dict[int, str]:
    """Per stacking level, what a model fits there, in words."""
    out = {}
    for level in sorted({t.level for t in fits}):
        mine = [t for t in fits if t.level == level]
        folds = sum(t.fold_set is None or len(t.fold_set) == 1 for t in mine)
        inner = sum(t.inner for t in mine)
        refit = sum(t.fold_set == () for t in mine)
        parts = [f"{folds} fold fit(s)", f"{inner} without 2+ folds" if inner else "", "refit" if refit else ""]
        out[level] = ", ".join(p for p in parts if p)
    return out


def graph_steps(plan: Plan) -> list[tuple[str, int]]:
    """The plan's tasks as the steps they run in: runs of one kind (and stacking level), in plan order;
    the trials' fits and bags counted whole, those the plan does not list included."""
    steps: list[list] = []
    unlisted = {"fit": plan.unlisted_fits, "bag": sum(plan.unlisted(a.model) for a in plan.allocations)}
    for t in plan.tasks:
        step = t.kind
        if t.kind == "fit" and t.fold_set == ():
            step = "refit fit"
        elif t.kind in ("fit", "bag") and (t.fold_set is not None or t.level > 1):
            step = f"{t.kind} L{t.level}"
        if steps and steps[-1][0] == step:
            steps[-1][1] += 1
        else:
            steps.append([step, 1 + unlisted.pop(step, 0)])
    return [(step, count) for step, count in steps]


def by_kind(plan: Plan) -> dict[str, list]:
    """The plan's tasks grouped by node kind, kinds in the order they first appear."""
    groups: dict[str, list] = defaultdict(list)
    for t in plan.tasks:
        groups[t.kind].append(t)
    return dict(groups)


def memory_line(memory) -> str:
    if memory.capacity is None:
        return f"memory: {memory.note}"
    c, s = memory.capacity, memory.shape
    parts = [f"RAM {gb(c.ram)} ({c.ram_source}), {gb(c.ram_for_fits)} for fits" if c.ram is not None
             else f"RAM {c.ram_source}"]
    if c.gpu is not None:
        parts.append(f"{gb(c.gpu)} per GPU ({c.gpu_source})")
    elif c.gpu_source != "no GPU":
        parts.append(f"GPU memory {c.gpu_source}")
    parts.append(f"data {s.rows:,} rows x {s.features} features ({s.source})")
    return "memory: " + "; ".join(parts)


def print_plan(plan: Plan) -> None:
    console.print(plan_tree(plan))


def print_roles(roles) -> None:
    """One line per column role (schema.json has every column and its reason)."""
    console.print(f"columns ({roles.sample_rows:,} rows sampled; each column's reason in schema.json):")
    for line in roles.summary():
        console.print(f"  {line}", soft_wrap=True, highlight=False, markup=False)


def leaderboard_table(rows: list[dict], metric: str) -> Table:
    """The leaderboard; a `reused` column (folds taken from an earlier run / folds) when any were."""
    table = Table(title=f"Leaderboard ({metric})", show_lines=False)
    reused = any(r.get("reused_folds") for r in rows)
    for column, justify in (
        ("model", "left"), ("level", "right"), (f"val_{metric}", "right"), (f"test_{metric}", "right"),
        ("fit_s", "right"), ("predict_s", "right"), ("rows/s", "right"), ("device", "left"), ("folds", "right"),
        *([("reused", "right")] if reused else []), ("trial", "right"),
    ):
        table.add_column(column, justify=justify)
    for r in rows:
        val = r[f"val_{metric}"]
        rate = r.get("predict_rows_per_s")
        cells = [
            r["model"], str(r.get("level", 1)), "-" if val != val else f"{val:.4f}", f"{r[f'test_{metric}']:.4f}",
            f"{r['fit_seconds']:.2f}", f"{r['predict_seconds']:.2f}", "-" if rate is None else f"{rate:,.0f}",
            str(r["device"]), str(r["num_folds"]),
        ]
        if reused:
            cells.append(f"{r['reused_folds']}/{r['num_folds']}" if r.get("reused_folds") else "-")
        table.add_row(*cells, str(r["best_trial"]))
    with_threshold = [r for r in rows if r.get("threshold") is not None]
    if with_threshold:
        name = with_threshold[0]["threshold_metric"]
        each = (f"{r['model']} {r['threshold']:.3f} (test {name} {r[f'test_{name}_at_threshold']:.4f})"
                for r in with_threshold)
        table.caption = (f"labels at each model's decision threshold, chosen for {name} on out-of-fold "
                         f"predictions: {', '.join(each)}")
    return table


def time_limit_line(limit_s, fit_limit_s=None, refit: bool = False) -> str:
    """Under the plan: what time_limit_s (or fit_time_limit_s) will do to it."""
    if limit_s is not None:
        after = f"{'refits, ' if refit else ''}ensemble, saving and logging"
        head = (f"time limit: {limit_s:g} s for the whole run (time_limit_s), start-up to the last line; the fits "
                f"end early enough for the {after} after them")
    else:
        head = f"time limit: {fit_limit_s:g} s for the fits (fit_time_limit_s), from the first one"
    return head + ("; trials run round by round across the models, and fits that cannot end by then are not "
                   "started")


def run_time_line(limit_s: float, started: float) -> str:
    """The run's last line under time_limit_s: how long it took, start-up included."""
    import time

    took = time.time() - started
    within = "within" if took <= limit_s else "past"
    return f"time_limit_s={limit_s:g} s: the run took {took:.1f} s from start-up to this line, {within} the limit"


def budget_lines(summary) -> list[str]:
    """What the time limit cut (pipeline.graph.time_budget.BudgetSummary), as the run's last lines say it."""
    lines = [summary.line()]
    if summary.left_out:
        lines.append(f"not on the leaderboard nor in the ensemble: {', '.join(summary.left_out)} (no trial finished "
                     f"all its folds within {summary.key}={summary.limit_s:g})")
    return lines


class ConsoleHooks:
    """The console as a subscriber of the run's events (pipeline.run): what the time limit cut."""

    def on_time_budget(self, summary) -> None:
        for line in budget_lines(summary):
            console.print(line, highlight=False, soft_wrap=True)


def memory_table(rows: list[dict]) -> Table:
    """Estimated vs measured peak memory per model (MiB)."""
    table = Table(title="Memory per fit (MiB): estimate vs measured peak", show_lines=False)
    for column in ("model", "estimate_ram", "peak_ram", "estimate_gpu", "peak_gpu"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for r in rows:
        cell = lambda key: "-" if r.get(key) in (None, 0, 0.0) else f"{r[key]:,.0f}"  # noqa: E731
        table.add_row(r["model"], cell("estimate_ram_mb"), cell("peak_ram_mb"), cell("estimate_gpu_mb"),
                      cell("peak_gpu_mb"))
    return table


class FitProgress:
    """A progress bar per model (fits done of fits planned); quiet when not a terminal."""

    def __init__(self, plan: Plan, enabled: Optional[bool] = None):
        self.enabled = sys.stdout.isatty() if enabled is None else enabled
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=False, disable=not self.enabled,
        )
        fits = Counter(t.model for t in plan.fit_tasks)  # and those of the trials the plan counts, not lists
        fits.update({a.model: plan.unlisted(a.model) * a.num_folds for a in plan.allocations})
        self.ids = {a.model: self.progress.add_task(f"{a.model:>12}", total=fits[a.model]) for a in plan.allocations}

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def advance(self, model: str) -> None:
        self.progress.advance(self.ids[model])
        self._stop_when_finished()

    def drop(self, model: str, count: int = 1) -> None:
        """`count` fits of `model` that will not run (the time limit cut them): fewer to wait for."""
        task = next(t for t in self.progress.tasks if t.id == self.ids[model])
        self.progress.update(self.ids[model], total=max(task.completed, (task.total or 0) - count))
        self._stop_when_finished()

    def _stop_when_finished(self) -> None:
        if self.progress.finished:  # every fit is done: the evaluation prints below, not under live bars
            self.progress.stop()
