"""What a run writes and logs as its graph runs: the hooks the composition root attaches to the
scheduler. The nodes compute; these hooks advance the progress display, write the run directory
(run_state.json, leaderboard, predictors, timeline, memory) and send each result to the tracker (a child
run per HPO trial, per-model and ensemble metrics, the models, tags, plots)."""

from __future__ import annotations

import json
import pickle
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from pipeline.store import atomic_write_bytes, write_state

if TYPE_CHECKING:
    from pipeline.graph.nodes.context import TrialResult
    from pipeline.graph.plan import Task


@dataclass(frozen=True)
class RunOutputs:
    """Where a run's results go: the run directory, the tracker, and how models are registered."""

    run_dir: Path
    tracker: Any  # tracking.Tracker (NullTracker when tracking=none)
    register_model: Optional[str] = None  # tracking.register_model
    register_alias: str = "champion"  # tracking.register_alias


class OutputHooks:
    """Scheduler hooks: after the ensemble node, each model's metrics; after the refit node, the refits';
    after the evaluate node, everything the run leaves behind."""

    def __init__(self, out: RunOutputs, plan, data, metric, outcome_of):
        self.out, self.plan, self.data, self.metric = out, plan, data, metric
        self.outcome_of = outcome_of  # () -> the scheduler's Outcome (its timeline)

    def on_node_end(self, task, result) -> None:
        if task.kind == "ensemble":
            log_board(self.out.tracker, result, self.metric.name)
        elif task.kind == "refit":
            self.out.tracker.log_metrics({f"{r['model']}/test_{k[5:]}": v for r in result.rows
                                          for k, v in r.items() if k.startswith("test_")})
        elif task.kind == "evaluate":
            write_evaluation(self.out, result, self.plan, self.data, self.metric, self.outcome_of())


class RunRecord:
    """The run directory's run_state.json as the run goes: RUNNING when it starts fitting, the MLflow run's
    id once the tracker has it, the status and end time when it ends."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir

    def started(self) -> None:
        write_state(self.run_dir, status="RUNNING", started=time.time())

    def run_id(self, run_id: str) -> None:
        write_state(self.run_dir, mlflow_run_id=run_id)

    def ended(self, status: str) -> None:
        write_state(self.run_dir, status=status, ended=time.time())

    # as a subscriber of the run's events (pipeline.run)
    def on_run_start(self, start) -> None:
        self.started()

    def on_time_budget(self, summary) -> None:
        write_state(self.run_dir, time_budget=summary.to_json())

    def on_run_end(self, status: str, run_dir: Path) -> None:
        self.ended(status)


class RunHooks:
    """Advances the model's progress bar per fit; logs each finished trial when an HPO search runs;
    after each fit, hands the MLflow run's id to `on_run_id` once the tracker has started that run
    (a run that could not start stops the fits there, with the tracker's TrackingError)."""

    def __init__(self, progress, tracker, metric, log_trials: bool,
                 on_run_id: Optional[Callable[[str], None]] = None):
        self.progress, self.tracker, self.metric, self.log_trials = progress, tracker, metric, log_trials
        self.on_run_id, self.run_id = on_run_id, None

    def on_task_start(self, task: Task) -> None:
        pass

    def on_task_end(self, task: Task, result) -> None:
        self.progress.advance(task.model)
        if self.run_id is None and self.tracker.enabled:
            self.run_id = self.tracker.poll()
            if self.run_id is not None and self.on_run_id is not None:
                self.on_run_id(self.run_id)

    def on_tasks_cut(self, tasks: list[Task]) -> None:
        """The time limit cut tasks before they finished: their fits leave their models' progress bars."""
        for model, count in Counter(t.model for t in tasks if t.kind == "fit").items():
            self.progress.drop(model, count)

    def on_fits_dropped(self, model: str, count: int) -> None:
        """Fits of trials never made (the time limit ended the search first): they leave the progress bar."""
        self.progress.drop(model, count)

    def on_trial_end(self, trial: TrialResult) -> None:
        if not self.log_trials:
            return
        from pipeline.metrics import choice_metric

        scores = {f"val_{choice_metric(self.metric).name}": trial.score}  # the log loss under accuracy
        if trial.eval_score is not None:
            scores[f"val_{self.metric.name}"] = trial.eval_score
        self.tracker.log_trial(
            f"{trial.model} trial {trial.trial}",
            trial.params,
            {**scores, "fit_seconds": trial.fit_seconds},
            {"pipeline.model": trial.model, "pipeline.trial": trial.trial, "pipeline.pruned": trial.pruned},
        )


class HookList:
    """Several hook objects as one scheduler hook: each event goes to every hook that handles it, in
    order; an event none handles is a no-op."""

    def __init__(self, *hooks):
        self.hooks = [h for h in hooks if h is not None]

    def __getattr__(self, event: str):
        if event.startswith("__"):
            raise AttributeError(event)
        handlers = [getattr(h, event) for h in self.hooks if hasattr(h, event)]
        return lambda *args: [handler(*args) for handler in handlers]


def log_board(tracker, board, metric: str) -> None:
    """The best row's `val_<metric>` and `test_<metric>` (the run's main metric, updated when the run
    ends), then each model's scores, times and learning curves, and the weighted ensemble's scores and
    weights. The main metric goes first: MLflow's compare view plots the first metric a run logged."""
    import numpy as np

    main = (f"val_{metric}", f"test_{metric}")
    if board.rows:
        tracker.log_metrics({k: board.rows[0][k] for k in main if board.rows[0].get(k) is not None})
    for row in board.rows:
        name = row["model"]
        values = {f"{name}/{k}": v for k, v in row.items() if k.startswith(("val_", "test_"))}
        if row.get("threshold") is not None:  # a binary model's decision threshold
            values[f"{name}/threshold"] = float(row["threshold"])
        trial = board.best.get(name)
        if trial is None:  # the weighted ensemble: its weights are its params
            values.update({f"{name}/weight/{n}": float(w) for n, w in json.loads(row["params"]).items()})
            tracker.log_metrics(values)
            continue
        values.update({f"{name}/fit_seconds": trial.fit_seconds, f"{name}/predict_seconds": trial.predict_seconds})
        fold0 = trial.folds[0].model
        for attr in ("oom_backoffs_", "batch_size_", "best_epoch_", "best_iteration_"):
            if hasattr(fold0, attr):
                values[f"{name}/{attr.rstrip('_')}"] = float(np.mean([getattr(f.model, attr) for f in trial.folds]))
        tracker.log_metrics(values)
        for k, fold in enumerate(trial.folds):
            tracker.log_history(name if len(trial.folds) == 1 else f"{name}/fold{k}", fold.model.history_)


def write_evaluation(out: RunOutputs, evaluation, plan, data, metric, outcome) -> None:
    """The leaderboard (printed, leaderboard.csv, logged), the predictors (saved and logged, the best one
    registered), the main metric and tags, memory and timeline, and the plots."""
    import pandas as pd

    from pipeline import report
    from pipeline.accelerators import devices_used

    tracker, rows, top = out.tracker, evaluation.rows, evaluation.top
    _log_throughput(rows, tracker)
    leaderboard_path = out.run_dir / "leaderboard.csv"
    atomic_write_bytes(leaderboard_path, pd.DataFrame(rows).to_csv(index=False).encode())
    report.console.print(report.leaderboard_table(rows, metric.name))
    saved = save_predictors(out.run_dir, evaluation.predictors, top["model"])
    # first: the tracker logs the models while this process draws the plots
    _log_models(out, evaluation.predictors, saved, rows, top["model"], _raw_example(data), tracker)
    val = f"val_{metric.name}"
    # a blend with refits has no held-out score (they learnt every row): the bagged side's answer's stands in
    scored = next((r for r in rows if r[val] == r[val]), top)
    scores = {val: scored[val], f"test_{metric.name}": top[f"test_{metric.name}"]}
    # the main metric at the top level, where MLflow's run list and charts show it unasked
    tracker.log_metrics({**scores, **{f"best/{k}": v for k, v in scores.items()}})
    tracker.set_tags({
        "best/model": top["model"],
        "pipeline.eval_metric": metric.name,
        "pipeline.gpu_ids": devices_used([e for e in outcome.timeline if not e["cached"]],
                                         plan.hardware.visible_devices),
    })
    tracker.log_artifact(leaderboard_path)
    _log_memory(plan, outcome, out.run_dir, tracker, report)
    _log_artifacts(outcome, evaluation.best, out.run_dir, tracker)
    held_out = "" if scored is top else f" of {scored['model']}, which it blends with the refits"
    report.console.print(f"best: {top['model']} (val {metric.name} {scored[val]:.4f}{held_out}); "
                         f"run directory {out.run_dir}")


def save_predictors(run_dir: Path, predictors: dict, best: str) -> dict[str, bytes]:
    """Each predictor pickled under run_dir/predictors/, and the name of the best in predictors/BEST,
    for batch prediction from the run directory; the bytes written, by name (what logging a model sends).
    A fold model sits in its bag, in every stacked bag above it and in the ensemble: its booster is
    serialized once (`_OnceEach`), not once per file."""
    import io

    from pipeline.predictor_source import BEST_FILE, PREDICTORS_DIR

    folder, reductions, saved = run_dir / PREDICTORS_DIR, {}, {}
    for name, predictor in predictors.items():
        buffer = io.BytesIO()
        _OnceEach(buffer, reductions).dump(predictor)
        saved[name] = buffer.getvalue()
        atomic_write_bytes(folder / f"{name}.pkl", saved[name])
    atomic_write_bytes(folder / BEST_FILE, best.encode())
    return saved


class _OnceEach(pickle.Pickler):
    """A pickler that reuses a booster's reduction (its model string, or raw bytes) across the files of one
    save: `reductions` maps id(booster) to (booster, reduction), the booster kept referenced so that its
    id is not reused meanwhile. The boosters are the fitted objects the model kinds' profiles name
    (ModelProfile.shared_objects). They are not compressed: zlib took 0.86 s of a 30-s run's tail for a
    2.7-times smaller save of 43 boosters (Computers), where writing them as they are takes 0.55 s."""

    def __init__(self, file, reductions: dict):
        from pipeline.models.profile import loaded_profiles

        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.reductions = reductions
        self.boosters = {kind for profile in loaded_profiles() for kind in profile.shared_objects}

    def reducer_override(self, obj):
        if (type(obj).__module__, type(obj).__name__) not in self.boosters:
            return NotImplemented
        if id(obj) not in self.reductions:
            self.reductions[id(obj)] = (obj, obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL))
        return self.reductions[id(obj)][1]


def _log_models(out, predictors: dict, saved: dict, rows: list[dict], best: str, example, tracker) -> None:
    """Every predictor as a pyfunc with its own scores and fit time (its leaderboard row's), its pickle the
    bytes `saved` in the run folder; the best one's URI as the run's `best/model_uri` tag, and registered
    under tracking.register_model with its alias."""
    scores = {r["model"]: {f"{r['model']}/{k}": v for k, v in r.items()
                           if k.startswith(("val_", "test_")) or k == "fit_seconds"} for r in rows}
    uris = {name: tracker.log_predictor(name, predictor, example, scores.get(name, {}), saved.get(name))
            for name, predictor in predictors.items()}
    if uris.get(best) is None:
        return
    tracker.set_tags({"best/model_uri": uris[best]})
    if out.register_model:
        version = tracker.register_model(uris[best], out.register_model, out.register_alias)
        if version is not None:
            from pipeline import report

            report.console.print(f"registered {best} as models:/{out.register_model}@{out.register_alias} "
                                 f"(version {version})")


def _log_throughput(rows: list[dict], tracker) -> None:
    """Each predictor's test rows per second, as its leaderboard row has it (timed as the run scored
    the test rows: no extra prediction passes)."""
    tracker.log_metrics({f"{r['model']}/predict_rows_per_s": r["predict_rows_per_s"] for r in rows
                         if r.get("predict_rows_per_s") is not None})


def _log_memory(plan, outcome, run_dir: Path, tracker, report) -> None:
    """Each model's memory estimate beside the peak its fits reached: printed, logged, memory.json."""
    rows = memory_rows(plan, outcome.timeline)
    if not any(r["fits"] for r in rows):
        return
    report.console.print(report.memory_table(rows))
    path = run_dir / "memory.json"
    atomic_write_bytes(path, json.dumps(rows, indent=1).encode())
    tracker.log_artifact(path)
    on_gpu = {a.model for a in plan.allocations if a.fit.num_gpus}  # a CPU model's GPU figures are no figures
    tracker.log_metrics({f"{r['model']}/{key}": float(r[key]) for r in rows for key in
                         ("peak_ram_mb", "peak_gpu_mb", "estimate_ram_mb", "estimate_gpu_mb")
                         if r.get(key) is not None and ("gpu" not in key or r["model"] in on_gpu)})


def memory_rows(plan, timeline: list[dict]) -> list[dict]:
    """Per model, and with stacking per level above the first (named as the leaderboard names them,
    lightgbm_l2): the estimate beside the largest measured peak of its fits (cached fits skipped)."""
    from pipeline.graph.stacking import level_name
    from pipeline.memory.estimates import MiB

    rows = []
    for a in plan.allocations:
        for level in range(1, plan.stack_levels + 2):
            fits = [e for e in timeline if e["model"] == a.model and e.get("level", 1) == level and not e.get("cached")]
            if level > 1 and not fits:
                continue
            peak_ram = max((e.get("peak_ram_mb", 0.0) for e in fits), default=0.0)
            peak_gpu = max((e.get("peak_gpu_mb", 0.0) for e in fits), default=0.0)
            row = {"model": level_name(a.model, level), "fits": len(fits), "peak_ram_mb": round(peak_ram, 1),
                   "peak_gpu_mb": round(peak_gpu, 1)}
            if a.memory is not None:
                est = a.memory.at(level)
                row.update(estimate_ram_mb=round(est.ram / MiB, 1), estimate_gpu_mb=round(est.gpu / MiB, 1))
                row["ram_ratio"] = round(est.ram / MiB / peak_ram, 2) if peak_ram else None
                row["gpu_ratio"] = round(est.gpu / MiB / peak_gpu, 2) if peak_gpu and est.gpu else None
            rows.append(row)
    return rows


def _log_artifacts(outcome, best: dict, run_dir: Path, tracker) -> None:
    timeline_json = run_dir / "timeline.json"
    atomic_write_bytes(timeline_json, json.dumps(outcome.timeline, indent=1).encode())
    tracker.log_artifact(timeline_json)
    if not tracker.enabled:  # the plots are for MLflow's UI; the run directory keeps their data as JSON/CSV
        return
    from pipeline.plots import RunPlots

    # where they are drawn is the tracker's to say (a warm tracker service draws them for this process)
    tracker.log_plots(run_dir, RunPlots(
        timeline=outcome.timeline,
        histories={n: t.folds[0].model.history_ for n, t in best.items()},
        importances={n: _mean_importance(t) for n, t in best.items()},
    ))


def _mean_importance(trial):
    import numpy as np

    parts = [f.model.feature_importance() for f in trial.folds]
    parts = [p for p in parts if p]
    if not parts:
        return None
    keys = sorted(set().union(*parts))
    return {k: float(np.mean([p.get(k, 0.0) for p in parts])) for k in keys}


def _raw_example(data):
    """A few test rows as a user's table would hold them: text categories, numbers as read."""
    import pandas as pd

    if data.raw_example is not None:  # X's columns are features made from the input's
        return data.raw_example
    X = data.X.iloc[data.test_idx[:5]].copy()
    for c in X.columns:
        if isinstance(X[c].dtype, pd.CategoricalDtype):
            X[c] = X[c].astype(object)
        elif c in data.raw_dtypes:
            X[c] = X[c].astype(data.raw_dtypes[c])
    return X
