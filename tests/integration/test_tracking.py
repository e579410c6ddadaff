"""MLflow as users compare runs: a real tracking server, sweeps as parent and children, system metrics."""

import pytest

from tests.integration.mlflow_helpers import runs

pytestmark = pytest.mark.slow


def test_sweep_of_four_jobs_logs_to_a_real_server(cli, tmp_path, mlflow_server):
    cli("-m", "model=lightgbm,xgboost", "seed=0,1", "data.max_rows=1500", f"tracking.uri={mlflow_server.uri}",
        "tracking.experiment=server-sweep", check=True, timeout=400)
    client, all_runs = runs(tmp_path, "server-sweep", uri=mlflow_server.uri)
    (parent,) = [r for r in all_runs if r.data.tags.get("pipeline.sweep") == "parent"]
    children = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 4
    assert parent.info.status == "FINISHED" and all(c.info.status == "FINISHED" for c in children)
    names = sorted(c.info.run_name for c in children)
    assert names == sorted(f"{m} s={s}" for m in ("lightgbm", "xgboost") for s in (0, 1))
    assert parent.info.run_name == "sweep: lightgbm,xgboost × s=0,1"
    for child in children:
        assert child.data.params["seed"] in ("0", "1")
        assert child.data.params["data.max_rows"] == "1500"
        assert 0.8 < child.data.metrics["best/val_roc_auc"] <= 1.0
        assert child.data.tags["best/model"] in ("lightgbm", "xgboost")
        assert child.data.tags["pipeline.gpu_ids"] == "none"
        assert any(a.path == "leaderboard.csv" for a in client.list_artifacts(child.info.run_id))
        # dated by the job, not by when the sweep's one tracker process got to its calls: it spans the fit
        model = child.data.params["model"]
        seconds = (child.info.end_time - child.info.start_time) / 1000
        assert seconds >= child.data.metrics[f"{model}/fit_seconds"]
        assert child.data.tags["mlflow.source.name"].startswith("python -m pipeline -m model=")
    best = max(c.data.metrics["best/val_roc_auc"] for c in children)
    assert parent.data.metrics["best/val_roc_auc"] == pytest.approx(best) == parent.data.metrics["val_roc_auc"]


def test_system_metrics_are_logged(cli, tmp_path):
    cli("model=nn", "model.nn.params.max_epochs=6", "model.nn.params.patience=0", "data.max_rows=6000",
        "tracking.system_metrics=true", "tracking.system_metrics_interval_s=0.5", check=True)
    (run,) = [r for r in runs(tmp_path)[1] if "pipeline.run_dir" in r.data.tags]
    keys = set(run.data.metrics)
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= keys


def _finished_jobs(client, experiment: str, parent: str, numbers) -> None:
    """Finished job runs of `parent`, written in one transaction through MLflow's own tables (a thousand
    create_run and set_terminated calls take 15-20 s on the 2-core box)."""
    import uuid

    from mlflow.store.tracking.dbmodels.models import SqlRun, SqlTag

    store = client._tracking_client.store
    with store.ManagedSessionMaker(read_only=False) as session:
        for i in numbers:
            run_id = uuid.uuid4().hex
            session.add(SqlRun(run_uuid=run_id, name=f"job {i}", experiment_id=int(experiment), status="FINISHED",
                               start_time=1_000 + i, end_time=2_000 + i, lifecycle_stage="active",
                               artifact_uri=f"file:///nowhere/{run_id}", source_type="LOCAL", source_name="",
                               entry_point_name="", user_id="sweep", source_version=""))
            session.add(SqlTag(key="mlflow.parentRunId", value=parent, run_uuid=run_id))


def test_a_sweep_of_more_jobs_than_one_search_returns_is_closed_over_all_of_them(tmp_path):
    """MLflow's search returns 1,000 runs a call at most, the newest first: a sweep of 1,002 jobs has its
    parent summarised over every job, and a job that died among its first is marked FAILED."""
    import mlflow

    from pipeline.tracking.sweep import close_parent

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("sweep")
    parent = client.create_run(experiment, run_name="sweep").info.run_id

    def job(i: int, **tags) -> str:
        return client.create_run(experiment, run_name=f"job {i}", start_time=1_000 + i,
                                 tags={"mlflow.parentRunId": parent, **tags}).info.run_id

    dead = job(0)  # left RUNNING by a job that died
    best = job(1, **{"pipeline.eval_metric": "roc_auc", "best/model": "lightgbm"})
    client.log_metric(best, "best/val_roc_auc", 0.91)
    client.log_metric(best, "best/test_roc_auc", 0.89)
    client.set_terminated(best, "FINISHED")
    _finished_jobs(client, experiment, parent, range(2, 1002))
    assert len(client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent}'")) == 1000  # one call's most
    close_parent(client.tracking_uri, parent, tmp_path)

    assert client.get_run(dead).info.status == "FAILED"
    closed = client.get_run(parent)
    assert closed.info.status == "FAILED"  # a job did not finish
    assert closed.data.tags["best/job"] == "job 1" and closed.data.metrics["best/val_roc_auc"] == 0.91
