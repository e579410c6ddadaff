"""The evaluate node: the leaderboard of every board it depends on (the ensemble's, the refits'),
with each predictor's throughput, the saved and logged models, the run's artifacts; its result is the
leaderboard's rows, best first."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.graph.nodes import NodeKind, register
from pipeline.store import atomic_write_bytes


@register
class EvaluateNode(NodeKind):
    name = "evaluate"
    partial_inputs = True  # the boards that were made, when a time limit cut a node before it

    def run(self, task, inputs, ctx) -> list[dict]:
        import pandas as pd

        from pipeline import report
        from pipeline.devices import devices_used

        out = ctx.require_outputs(task)
        data, metric, plan, tracker, outcome = ctx.data, ctx.metric, ctx.plan, out.tracker, ctx.outcome
        boards = [inputs[d] for d in task.depends_on if d in inputs]
        rows = [r for b in boards for r in b.rows]
        predictors = {k: v for b in boards for k, v in b.predictors.items()}
        best = {k: v for b in boards for k, v in b.best.items()}
        _log_throughput(rows, tracker)
        leaderboard_path = out.run_dir / "leaderboard.csv"
        atomic_write_bytes(leaderboard_path, pd.DataFrame(rows).to_csv(index=False).encode())
        report.console.print(report.leaderboard_table(rows, metric.name))
        top = rows[0]
        save_predictors(out.run_dir, predictors, top["model"])
        # first: the tracker logs the models while this process draws the plots
        _log_models(out, predictors, top["model"], _raw_example(data), tracker)
        scores = {f"val_{metric.name}": top[f"val_{metric.name}"], f"test_{metric.name}": top[f"test_{metric.name}"]}
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
        _log_artifacts(outcome, best, out.run_dir, tracker)
        report.console.print(f"best: {top['model']} (val {metric.name} {top[f'val_{metric.name}']:.4f}); "
                             f"run directory {out.run_dir}")
        return rows

    def describe(self, tasks, plan) -> str:
        return "evaluate: the leaderboard on the test split, the saved models and the run's artifacts"


def save_predictors(run_dir: Path, predictors: dict, best: str) -> None:
    """Each predictor pickled under run_dir/predictors/, and the name of the best in predictors/BEST,
    for batch prediction from the run directory."""
    import pickle

    from pipeline.predictor_source import BEST_FILE, PREDICTORS_DIR

    folder = run_dir / PREDICTORS_DIR
    for name, predictor in predictors.items():
        atomic_write_bytes(folder / f"{name}.pkl", pickle.dumps(predictor, protocol=pickle.HIGHEST_PROTOCOL))
    atomic_write_bytes(folder / BEST_FILE, best.encode())


def _log_models(out, predictors: dict, best: str, example, tracker) -> None:
    """Every predictor as a pyfunc; the best one's URI as the run's `best/model_uri` tag, and
    registered under tracking.register_model with its alias."""
    uris = {name: tracker.log_predictor(name, predictor, example) for name, predictor in predictors.items()}
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
    from pipeline.memory.measure import compare

    rows = compare(plan, outcome.timeline)
    if not any(r["fits"] for r in rows):
        return
    report.console.print(report.memory_table(rows))
    path = run_dir / "memory.json"
    path.write_text(json.dumps(rows, indent=1))
    tracker.log_artifact(path)
    on_gpu = {a.model for a in plan.allocations if a.fit.num_gpus}  # a CPU model's GPU figures are no figures
    tracker.log_metrics({f"{r['model']}/{key}": float(r[key]) for r in rows for key in
                         ("peak_ram_mb", "peak_gpu_mb", "estimate_ram_mb", "estimate_gpu_mb")
                         if r.get(key) is not None and ("gpu" not in key or r["model"] in on_gpu)})


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

    X = data.X.iloc[data.test_idx[:5]].copy()
    for c in X.columns:
        if isinstance(X[c].dtype, pd.CategoricalDtype):
            X[c] = X[c].astype(object)
        elif c in data.raw_dtypes:
            X[c] = X[c].astype(data.raw_dtypes[c])
    return X
