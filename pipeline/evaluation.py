"""Run the plan's fits, then the ensemble and evaluation nodes: leaderboard, metrics, artifacts."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import metrics as metrics_module
from pipeline.ensemble import BaggedPredictor, EnsemblePredictor, FeatureSchema, blend, ensemble_selection
from pipeline.executors.scheduler import Outcome, TrialResult
from pipeline.metrics import Metric
from pipeline.plan import Plan, Task
from pipeline.store import atomic_write_bytes

log = logging.getLogger("pipeline")


class RunHooks:
    """Scheduler events to the progress display and to MLflow (a child run per HPO trial)."""

    def __init__(self, progress, tracker, metric: Metric, log_trials: bool):
        self.progress, self.tracker, self.metric, self.log_trials = progress, tracker, metric, log_trials

    def on_task_start(self, task: Task) -> None:
        pass

    def on_task_end(self, task: Task, result) -> None:
        self.progress.advance(task.model)

    def on_trial_end(self, trial: TrialResult) -> None:
        if not self.log_trials:
            return
        self.tracker.log_trial(
            f"{trial.model} trial {trial.trial}",
            trial.params,
            {f"val_{self.metric.name}": trial.score, "fit_seconds": trial.fit_seconds},
            {"pipeline.model": trial.model, "pipeline.trial": trial.trial, "pipeline.pruned": trial.pruned},
        )


def fit_all(settings, plan: Plan, data, metric: Metric, runtime, tracker, backend) -> Outcome:
    from pipeline.executors.scheduler import Scheduler
    from pipeline.hpo import TrialSource
    from pipeline.report import FitProgress
    from pipeline.store import ResultStore, resume_sources

    sources = resume_sources(settings.resume, runtime.run_dir, runtime.launch_dir / "outputs")
    store = ResultStore(runtime.run_dir, sources)
    prior = {}
    for source in [*sources, runtime.run_dir]:  # this directory's own trials win
        for path in (source / "trials").glob("*.json"):
            prior[path.stem] = json.loads(path.read_text())
    trials = TrialSource(
        settings.hpo,
        {s.name: s.search_space for s in settings.models},
        {s.name: s.params for s in settings.models},
        "maximize" if metric.greater_is_better else "minimize",
        store_dir=runtime.run_dir / "trials",
        prior=prior,
    )
    ex = settings.executor
    with FitProgress(plan) as progress:
        scheduler = Scheduler(
            plan, backend, store, trials, {s.name: s.prototype() for s in settings.models}, data, metric,
            seed=settings.seed, max_retries=ex.max_retries, task_timeout_s=ex.task_timeout_s,
            hooks=RunHooks(progress, tracker, metric, settings.hpo.searcher != "none"),
            pruning=settings.hpo.pruning,
        )
        return scheduler.run()


def evaluate(settings, plan: Plan, data, metric: Metric, outcome: Outcome, runtime, tracker) -> list[dict]:
    """Leaderboard of the best trial of each model, their weighted ensemble and (refit=true) their
    refits on all the data; returns its rows, best first."""
    from pipeline import plots, report

    problem = data.problem_type
    y_test = data.y[data.test_idx]
    best = {a.model: outcome.best(a.model, metric) for a in plan.allocations}
    schema = FeatureSchema.of(data.X, data.raw_dtypes, data.label, settings.data.unseen_categories)
    rows, predictors = [], {}
    for name, trial in best.items():
        val_scores = metrics_module.score_all(problem, data.y[trial.held_out], trial.val_pred)
        test_scores = metrics_module.score_all(problem, y_test, trial.test_pred)
        rows.append(_row(name, trial, val_scores, test_scores, metric, plan))
        predictors[name] = BaggedPredictor(name, [f.model for f in trial.folds], problem, data.classes, schema)
        _log_model_metrics(tracker, name, val_scores, test_scores, trial)
    if len(best) >= 2:
        rows.append(_ensemble(best, data, metric, problem, predictors, tracker))
    rows.sort(key=lambda r: metric.loss_of(r[f"val_{metric.name}"]))  # NaN last
    if settings.refit:
        from pipeline.refit import refit_all

        refits = refit_all(best, predictors, data, metric, plan, settings.seed, schema)
        tracker.log_metrics({f"{r['model']}/test_{k[5:]}": v for r in refits for k, v in r.items()
                             if k.startswith("test_")})
        rows += refits
    _measure_throughput(rows, predictors, data.X.iloc[data.test_idx], tracker)
    leaderboard = pd.DataFrame(rows)
    leaderboard_path = runtime.run_dir / "leaderboard.csv"
    atomic_write_bytes(leaderboard_path, leaderboard.to_csv(index=False).encode())
    report.console.print(report.leaderboard_table(rows, metric.name))
    top = rows[0]
    save_predictors(runtime.run_dir, predictors, top["model"])
    # first: the tracker logs the models while this process draws the plots
    _log_models(settings, predictors, top["model"], _raw_example(data), tracker)
    tracker.log_metrics({f"best/val_{metric.name}": top[f"val_{metric.name}"],
                         f"best/test_{metric.name}": top[f"test_{metric.name}"]})
    from pipeline.devices import devices_used

    tracker.set_tags({
        "best/model": top["model"],
        "pipeline.eval_metric": metric.name,
        "pipeline.gpu_ids": devices_used([e for e in outcome.timeline if not e["cached"]], plan.hardware.visible_devices),
    })
    tracker.log_artifact(leaderboard_path)
    _log_memory(plan, outcome, runtime.run_dir, tracker, report)
    _log_artifacts(outcome, best, runtime.run_dir, tracker, plots)
    report.console.print(f"best: {top['model']} (val {metric.name} {top[f'val_{metric.name}']:.4f}); "
                         f"run directory {runtime.run_dir}")
    return rows


def save_predictors(run_dir: Path, predictors: dict, best: str) -> None:
    """Each predictor pickled under run_dir/predictors/, and the name of the best in predictors/BEST,
    for batch prediction from the run directory."""
    import pickle

    from pipeline.predictor_source import BEST_FILE, PREDICTORS_DIR
    from pipeline.store import atomic_write_bytes

    folder = run_dir / PREDICTORS_DIR
    for name, predictor in predictors.items():
        atomic_write_bytes(folder / f"{name}.pkl", pickle.dumps(predictor, protocol=pickle.HIGHEST_PROTOCOL))
    atomic_write_bytes(folder / BEST_FILE, best.encode())


def _log_models(settings, predictors: dict, best: str, example, tracker) -> None:
    """Every predictor as a pyfunc; the best one's URI as the run's `best/model_uri` tag, and
    registered under tracking.register_model with its alias."""
    uris = {name: tracker.log_predictor(name, predictor, example) for name, predictor in predictors.items()}
    if uris.get(best) is None:
        return
    tracker.set_tags({"best/model_uri": uris[best]})
    name = settings.tracking.register_model
    if name:
        version = tracker.register_model(uris[best], name, settings.tracking.register_alias)
        if version is not None:
            from pipeline import report

            report.console.print(f"registered {best} as models:/{name}@{settings.tracking.register_alias} "
                                 f"(version {version})")


def _measure_throughput(rows: list[dict], predictors: dict, X_test: pd.DataFrame, tracker) -> None:
    """Rows per second each predictor scores the (typed) test rows at: the best of a few passes, after
    a warm-up that builds lazily created state (a network moved to its device)."""
    for row in rows:
        predictor = predictors[row["model"]]
        predictor.predict_typed(X_test.iloc[:8])
        seconds, passes, start = [], 0, time.perf_counter()
        while passes < 3 and (passes == 0 or time.perf_counter() - start < 0.5):
            t0 = time.perf_counter()
            predictor.predict_typed(X_test)
            seconds.append(time.perf_counter() - t0)
            passes += 1
        row["predict_rows_per_s"] = len(X_test) / max(min(seconds), 1e-9)
    tracker.log_metrics({f"{r['model']}/predict_rows_per_s": r["predict_rows_per_s"] for r in rows})


def _row(name: str, trial: TrialResult, val: dict, test: dict, metric: Metric, plan: Plan) -> dict:
    devices = sorted({d for f in trial.folds for d in f.gpu_ids if f.device != "cpu"})
    device = "GPU " + plan.hardware.visible_devices(devices) if devices else "cpu"
    row = {"model": name}
    row.update({f"val_{k}": v for k, v in val.items()})
    row.update({f"test_{k}": v for k, v in test.items()})
    row.update(
        fit_seconds=trial.fit_seconds, predict_seconds=trial.predict_seconds, device=device,
        num_folds=len(trial.folds), best_trial=trial.trial, params=json.dumps(trial.params, default=str),
    )
    return row


def _ensemble(best: dict[str, TrialResult], data, metric: Metric, problem: str, predictors: dict, tracker) -> dict:
    trials = list(best.values())
    held = trials[0].held_out
    if any(not np.array_equal(t.held_out, held) for t in trials):
        raise RuntimeError("models were validated on different rows; cannot ensemble them")
    t0 = time.perf_counter()
    weights = ensemble_selection([t.val_pred for t in trials], data.y[held], metric, names=list(best))
    seconds = time.perf_counter() - t0
    val_pred = blend([t.val_pred for t in trials], weights)
    test_pred = blend([t.test_pred for t in trials], weights)
    val_scores = metrics_module.score_all(problem, data.y[held], val_pred)
    test_scores = metrics_module.score_all(problem, data.y[data.test_idx], test_pred)
    names = list(best)
    predictors["ensemble"] = EnsemblePredictor("ensemble", [predictors[n] for n in names], list(map(float, weights)),
                                               problem, data.classes)
    tracker.log_metrics({f"ensemble/val_{k}": v for k, v in val_scores.items()}
                        | {f"ensemble/test_{k}": v for k, v in test_scores.items()}
                        | {f"ensemble/weight/{n}": float(w) for n, w in zip(names, weights)})
    row = {"model": "ensemble"}
    row.update({f"val_{k}": v for k, v in val_scores.items()})
    row.update({f"test_{k}": v for k, v in test_scores.items()})
    row.update(fit_seconds=seconds, predict_seconds=0.0, device="cpu", num_folds=len(trials[0].folds),
               best_trial="-", params=json.dumps(dict(zip(names, map(float, weights)))))
    return row


def _log_model_metrics(tracker, name: str, val: dict, test: dict, trial: TrialResult) -> None:
    values = {f"{name}/val_{k}": v for k, v in val.items()}
    values.update({f"{name}/test_{k}": v for k, v in test.items()})
    values.update({f"{name}/fit_seconds": trial.fit_seconds, f"{name}/predict_seconds": trial.predict_seconds})
    fold0 = trial.folds[0].model
    for attr in ("oom_backoffs_", "batch_size_", "best_epoch_", "best_iteration_"):
        if hasattr(fold0, attr):
            values[f"{name}/{attr.rstrip('_')}"] = float(np.mean([getattr(f.model, attr) for f in trial.folds]))
    tracker.log_metrics(values)
    for k, fold in enumerate(trial.folds):
        prefix = name if len(trial.folds) == 1 else f"{name}/fold{k}"
        tracker.log_history(prefix, fold.model.history_)


def _log_memory(plan: Plan, outcome: Outcome, run_dir: Path, tracker, report) -> None:
    """Each model's memory estimate beside the peak its fits reached: printed, logged, memory.json."""
    from pipeline.memory.measure import compare

    rows = compare(plan, outcome.timeline)
    if not any(r["fits"] for r in rows):
        return
    report.console.print(report.memory_table(rows))
    path = run_dir / "memory.json"
    path.write_text(json.dumps(rows, indent=1))
    tracker.log_artifact(path)
    tracker.log_metrics({f"{r['model']}/{key}": float(r[key]) for r in rows for key in
                         ("peak_ram_mb", "peak_gpu_mb", "estimate_ram_mb", "estimate_gpu_mb") if r.get(key) is not None})


def _log_artifacts(outcome: Outcome, best: dict[str, TrialResult], run_dir: Path, tracker, plots) -> None:
    timeline_json = run_dir / "timeline.json"
    atomic_write_bytes(timeline_json, json.dumps(outcome.timeline, indent=1).encode())
    tracker.log_artifact(timeline_json)
    if not tracker.enabled:  # the plots are for MLflow's UI; the run directory keeps their data as JSON/CSV
        return
    for path in (
        plots.timeline(outcome.timeline, run_dir / "timeline.png"),
        plots.learning_curves({n: t.folds[0].model.history_ for n, t in best.items()}, run_dir / "learning_curves.png"),
        plots.feature_importance(
            {n: _mean_importance(t) for n, t in best.items()}, run_dir / "feature_importance.png"
        ),
    ):
        if path is not None:
            tracker.log_artifact(path)


def _mean_importance(trial: TrialResult):
    parts = [f.model.feature_importance() for f in trial.folds]
    parts = [p for p in parts if p]
    if not parts:
        return None
    keys = sorted(set().union(*parts))
    return {k: float(np.mean([p.get(k, 0.0) for p in parts])) for k in keys}


def _raw_example(data) -> pd.DataFrame:
    """A few test rows as a user's table would hold them: text categories, numbers as read."""
    X = data.X.iloc[data.test_idx[:5]].copy()
    for c in X.columns:
        if isinstance(X[c].dtype, pd.CategoricalDtype):
            X[c] = X[c].astype(object)
        elif c in data.raw_dtypes:
            X[c] = X[c].astype(data.raw_dtypes[c])
    return X
