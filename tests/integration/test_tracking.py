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
