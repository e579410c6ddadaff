"""A sweep in MLflow: its parent run, opened before its jobs log and closed with the sweep's summary.

The parent is tagged with the sweep's directory. Opening it writes the sweep's PARENT_FILE (its
run id, or why there is none), which each job's tracker reads to make its run a child of it
(`sweep_parent`). Closing it marks any job run a dead job left RUNNING as FAILED, puts the sweep's
best job on the parent and tags a multi-objective search's Pareto front. The sweep's tracker host
(pipeline.tracking.sweep_host) does both, so the sweep's driver never imports MLflow.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Optional

from pipeline.tracking import secure
from pipeline.tracking.store import SWEEP_DIR_TAG, SWEEP_TAG, Store, ensure_experiment, mark_orphans

log = logging.getLogger(__name__)


def sweep_directory(launch_dir: Path, sweep_dir) -> Path:
    """A sweep's directory as its parent run is tagged with and its jobs look it up: absolute."""
    return (Path(launch_dir) / str(sweep_dir)).resolve()


PARENT_FILE = "mlflow_parent_run"  # in a sweep's directory: the parent run's id, or where it stands
PARENT_PENDING = "pending"
PARENT_FAILED = "failed:"
PARENT_WAIT_S = 120.0  # how long a job waits for the sweep's parent run to be created
SEARCH_PAGE = 1000  # runs per MLflow search call (its most)


def write_parent_file(sweep_dir: Path, text: str) -> None:
    """Say where the sweep's parent run stands, for its jobs: PARENT_PENDING, its run id, or PARENT_FAILED
    and why."""
    Path(sweep_dir).mkdir(parents=True, exist_ok=True)
    dir_fd = os.open(sweep_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        secure.write_private(PARENT_FILE, text.encode(), dir_fd)
    finally:
        os.close(dir_fd)


def sweep_overrides(sweep_dir: Path) -> list[str]:
    """The overrides the sweep was started with (`a=1,2`), from the multirun.yaml its sweeper wrote
    before launching the jobs; none where there is no such file."""
    from omegaconf import OmegaConf

    try:
        return list(OmegaConf.load(Path(sweep_dir) / "multirun.yaml").hydra.overrides.task)
    except Exception:  # noqa: BLE001  (a launcher that writes none: the job's own order stands)
        return []


def read_parent_file(sweep_dir) -> Optional[str]:
    """What the sweep's PARENT_FILE says, or None: there is none, or another user could have written
    it (a warning says so, and the parent is looked up in the store instead)."""
    try:
        return secure.read_private(Path(sweep_dir) / PARENT_FILE).decode().strip()
    except secure.UnsafeFile as exc:
        log.warning("ignoring %s: %s", PARENT_FILE, exc)
    except (OSError, UnicodeDecodeError):
        pass
    return None


def sweep_parent(uri: str, experiment_id: str, sweep_dir: str, wait_s: float = PARENT_WAIT_S) -> Optional[str]:
    """The id of the sweep's parent run: from the sweep's PARENT_FILE (waiting while it says the parent
    is being created, at most `wait_s`), else the newest parent run tagged with this sweep directory in
    the store, or None."""
    path = Path(sweep_dir) / PARENT_FILE
    deadline = time.monotonic() + wait_s
    while (text := read_parent_file(sweep_dir)) is not None:
        if text.startswith(PARENT_FAILED):
            return None
        if text != PARENT_PENDING:
            return text
        if time.monotonic() > deadline:  # the sweep's driver died while creating it: log without a parent
            log.warning("the sweep's MLflow parent run was not created within %g s (%s still says %r); "
                        "this run has no parent", wait_s, path, PARENT_PENDING)
            return None
        time.sleep(0.05)
    import mlflow

    quote = '"' if "'" in sweep_dir else "'"
    found = mlflow.MlflowClient(uri).search_runs(
        [experiment_id], max_results=1, order_by=["attributes.start_time DESC"],
        filter_string=f"tags.`{SWEEP_TAG}` = 'parent' AND tags.`{SWEEP_DIR_TAG}` = {quote}{sweep_dir}{quote}",
    )
    return found[0].info.run_id if found else None


def open_parent(store: Store, experiment: str, sweep_dir: Path, name: str, overrides: str = "") -> Optional[str]:
    """Create the parent run and write its id to the sweep's PARENT_FILE; on failure write why
    there is none there and return None (each job then logs without a parent)."""
    try:
        import mlflow

        experiment_id = ensure_experiment(store.uri, experiment, store.artifact_root)
        run = mlflow.MlflowClient(store.uri).create_run(
            experiment_id, run_name=name,
            tags={SWEEP_DIR_TAG: str(sweep_dir), SWEEP_TAG: "parent", "pipeline.overrides": overrides or name},
        )
    except Exception as exc:  # noqa: BLE001  (each job reports the store's error from its own tracker)
        from pipeline.redact import redact_text

        message = redact_text(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        log.error("the sweep's MLflow parent run could not be created (%s); its jobs log without one", message)
        write_parent_file(sweep_dir, f"{PARENT_FAILED} {message}")
        return None
    write_parent_file(sweep_dir, run.info.run_id)
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


def closing_lines(store: Store, parent_run_id: str, ui_port: int) -> list[str]:
    """What the sweep's console ends with: its parent run's link in MLflow's UI and the experiment's
    shared view (pipeline.tracking.view), for a local store after the `mlflow ui` command that serves it."""
    import mlflow

    from pipeline.tracking import view

    experiment_id = mlflow.MlflowClient(store.uri).get_run(parent_run_id).info.experiment_id
    base = view.ui_base(store.uri, store.remote, ui_port)
    lines = [] if store.remote else [f"see the sweep with `{view.serve_command(store.uri, ui_port)}`, then:"]
    return lines + [f"MLflow sweep run {parent_run_id}: {view.run_link(base, experiment_id, parent_run_id)}",
                    f"all runs, best first: {view.runs_link(base, experiment_id)}"]


def _close_children(uri: str, client, parent_run_id: str) -> list:
    """The sweep's job runs, every page of them (MLflow's search returns 1,000 at most per call, the newest
    first: a sweep of more jobs lost its first ones from the summary, and a dead one among them stayed
    RUNNING), with any a dead job left RUNNING marked FAILED."""
    experiment_id = client.get_run(parent_run_id).info.experiment_id
    children, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=SEARCH_PAGE, page_token=token,
                                  filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'")
        children += page
        token = page.token
        if not token:
            break
    mark_orphans(uri, [c.info.run_id for c in children if c.info.status == "RUNNING"])  # each read again
    return children


def _summarise(client, parent_run_id: str, children) -> None:
    """The sweep's best job on the parent run: val_<metric> and test_<metric> at the top level (as
    each job has them) and under best/, best/model, best/job."""
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
    scores = {f"val_{metric}": value}
    if f"best/test_{metric}" in child.data.metrics:
        scores[f"test_{metric}"] = child.data.metrics[f"best/test_{metric}"]
    for key, score in scores.items():
        client.log_metric(parent_run_id, key, score)
        client.log_metric(parent_run_id, f"best/{key}", score)
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
