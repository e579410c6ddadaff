"""A sweep's MLflow parent run: opened before its jobs log, closed with the sweep's summary.

The parent is tagged with the sweep's directory. Opening it writes the sweep's PARENT_FILE (its
run id, or why there is none), which each job's tracker reads to make its run a child of it
(`pipeline.tracking.sweep_parent`). Closing it marks any job run a dead job left RUNNING as FAILED,
puts the sweep's best job on the parent and tags a multi-objective search's Pareto front. The
sweep's tracker process (pipeline.tracker_server) does both, so the sweep's driver never imports
MLflow.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)


def open_parent(uri: str, experiment: str, artifact_root: Optional[Path], sweep_dir: Path, overrides: str) -> Optional[str]:
    """Create the parent run and write its id to the sweep's PARENT_FILE; on failure write why
    there is none there and return None (each job then logs without a parent)."""
    from pipeline import tracking as tr

    try:
        import mlflow

        experiment_id = tr.ensure_experiment(uri, experiment, artifact_root)
        run = mlflow.MlflowClient(uri).create_run(
            experiment_id, run_name=f"sweep {overrides}",
            tags={tr.SWEEP_DIR_TAG: str(sweep_dir), tr.SWEEP_TAG: "parent", "pipeline.overrides": overrides},
        )
    except Exception as exc:  # noqa: BLE001  (each job reports the store's error from its own tracker)
        from pipeline.redact import redact_text

        message = redact_text(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        log.error("the sweep's MLflow parent run could not be created (%s); its jobs log without one", message)
        tr.write_parent_file(sweep_dir, f"{tr.PARENT_FAILED} {message}")
        return None
    tr.write_parent_file(sweep_dir, run.info.run_id)
    log.info("MLflow parent run %s for this sweep", run.info.run_id)
    return run.info.run_id


def close_parent(uri: str, parent_run_id: str, sweep_dir: Optional[Path]) -> None:
    """End the parent run after the sweep: FAILED if any job's run did not finish (or `sweep_dir` is
    None: the sweep raised), else FINISHED, with the best job and the Pareto front on it."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    children = _close_children(uri, client, parent_run_id)
    if sweep_dir is None:
        client.set_terminated(parent_run_id, "FAILED")
        return
    failed = any(c.info.status != "FINISHED" for c in children)
    _summarise(client, parent_run_id, children)
    _tag_front(client, parent_run_id, children, sweep_dir)
    client.set_terminated(parent_run_id, "FAILED" if failed else "FINISHED")


def _close_children(uri: str, client, parent_run_id: str) -> list:
    """The sweep's job runs, with any a dead job left RUNNING marked FAILED."""
    from pipeline import tracking as tr

    children = client.search_runs(
        [client.get_run(parent_run_id).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'",
    )
    tr.mark_orphans(uri, [c.info.run_id for c in children])
    return children


def _summarise(client, parent_run_id: str, children) -> None:
    """The sweep's best job on the parent run: best/val_<metric>, best/model, best/job."""
    scored = []
    for child in children:
        metric = child.data.tags.get("pipeline.eval_metric")
        value = child.data.metrics.get(f"best/val_{metric}") if metric else None
        if value is not None:
            scored.append((metric, value, child))
    if not scored:
        return
    from pipeline.metrics import METRICS

    metric = scored[0][0]
    sign = 1 if METRICS[metric].greater_is_better else -1
    _, value, child = max(scored, key=lambda s: sign * s[1])
    client.log_metric(parent_run_id, f"best/val_{metric}", value)
    client.set_tag(parent_run_id, "best/job", child.info.run_name)
    client.set_tag(parent_run_id, "best/model", child.data.tags.get("best/model", ""))


def _tag_front(client, parent_run_id: str, children, sweep_dir: Path) -> None:
    """A multi-objective search's Pareto front (the `solutions` of optimization_results.yaml): each
    member's run gets `pipeline.pareto_front=true`, the parent run the list of their jobs."""
    path = sweep_dir / "optimization_results.yaml"
    if not path.exists():
        return
    import yaml

    solutions = (yaml.safe_load(path.read_text()) or {}).get("solutions") or []
    # members from earlier sessions of a stored study ran in other sweeps
    jobs = {str(s["job"]) for s in solutions if "job" in s and Path(str(s.get("sweep_dir"))) == sweep_dir}
    for child in children:
        if child.data.tags.get("pipeline.job_num") in jobs:
            client.set_tag(child.info.run_id, "pipeline.pareto_front", "true")
    if jobs:
        client.set_tag(parent_run_id, "pipeline.pareto_front_jobs", ",".join(sorted(jobs, key=int)))
