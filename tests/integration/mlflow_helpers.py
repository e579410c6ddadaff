"""Read back what a run logged, through MlflowClient."""

from __future__ import annotations

from pathlib import Path


def client_for(workdir: Path, uri: str | None = None):
    import mlflow

    return mlflow.MlflowClient(uri or f"sqlite:///{workdir / 'outputs' / 'mlflow.db'}")


def runs(workdir: Path, experiment: str = "pipeline", uri: str | None = None):
    client = client_for(workdir, uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, "no experiment was created"
    return client, client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"], max_results=500)


def job_runs(workdir: Path, uri: str | None = None):
    """Runs of jobs (not sweep parents, not HPO trial children)."""
    client, all_runs = runs(workdir, uri=uri)
    return client, [r for r in all_runs if "pipeline.run_dir" in r.data.tags]
