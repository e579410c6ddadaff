"""End-to-end: `python -m pipeline` as a user runs it, checked through the SQLite MLflow store."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import FAULT_ENV, ROOT, small, user_config
from tests.integration.mlflow_helpers import job_runs, runs

pytestmark = pytest.mark.slow


def run_dirs(workdir: Path):
    return sorted((workdir / "outputs" / "runs").glob("*/*"))


def test_default_job(default_run):
    """Exactly `python -m pipeline`: bundled Adult, detected hardware, all three models, local MLflow."""
    tmp_path, proc = default_run
    assert "Leaderboard (roc_auc)" in proc.stdout
    client, (run,) = job_runs(tmp_path)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "lightgbm+xgboost+nn"  # a single run's name says its models
    params, metrics = run.data.params, run.data.metrics
    # one prefix per model, the key a sweep overrides; the kind, to plot a score against
    assert params["data.name"] == "adult" and params["model.lightgbm.params.learning_rate"] == "0.05"
    assert params["model"] == "lightgbm,xgboost,nn"
    assert params["hpo"] == "none" and params["executor"] == "local"  # the components' kinds, as a user picks them
    # nothing that does not apply: no _target_ plumbing, no empty lists, no synthetic settings for Adult
    assert not [k for k in params if k.endswith("_target_") or k.startswith("tracking.") or ".search_space." in k]
    assert not {"allowed_targets", "data.features", "data.categorical_features", "data.drop_columns"} & set(params)
    assert not [k for k in metrics if "_gpu_mb" in k]  # no GPU figures on a CPU run
    assert {"val_roc_auc", "test_roc_auc"} <= set(metrics)  # the main metric at the top level
    assert "INFO mlflow" not in proc.stdout + proc.stderr and "View run" not in proc.stdout  # MLflow kept quiet
    # the console's last lines: how to see the runs, the run's link, the experiment's shared view (the
    # runs, best first), the best model and how to serve it
    last = proc.stdout.strip().splitlines()[-4:]
    assert last[0].startswith("see the runs with `mlflow ui --backend-store-uri sqlite:///")
    assert last[0].endswith("--port 5000`, then:")
    experiment = f"http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}"
    assert last[1] == f"MLflow run {run.info.run_id}: {experiment}/runs/{run.info.run_id}"
    assert last[2] == f"all runs, best first: {experiment}/runs?viewStateShareKey=pipeline"
    uri = run.data.tags["best/model_uri"]
    assert last[3].startswith(f"best model {uri}: serve it with `MLFLOW_TRACKING_URI=sqlite:///")
    assert last[3].endswith(f"mlflow models serve -m {uri} -p 5001 --env-manager local`")
    # MLflow's Source is the user's command; the run is dated by the job, not by its tracker's process
    assert run.data.tags["mlflow.source.name"] == "python -m pipeline"
    assert not [k for k in metrics if "gpu" in k]  # no GPU figure (nn/peak_gpu_memory_mb) on a CPU run
    for model in ("lightgbm", "xgboost", "nn", "ensemble"):
        assert 0.85 < metrics[f"{model}/val_roc_auc"] <= 1.0
        assert f"{model}/test_accuracy" in metrics
    for model in ("lightgbm", "xgboost", "nn"):
        assert metrics[f"{model}/fit_seconds"] > 0
    assert metrics["ensemble/val_roc_auc"] >= max(metrics[f"{m}/val_roc_auc"] for m in ("lightgbm", "xgboost", "nn"))
    assert run.data.tags["best/model"] in ("lightgbm", "xgboost", "nn", "ensemble")
    assert "nn/val_loss" in metrics and len(client.get_metric_history(run.info.run_id, "nn/val_loss")) >= 2
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "leaderboard.csv", "plan.json", "timeline.json", "timeline.png"} <= artifacts
    (run_dir,) = run_dirs(tmp_path)
    board = pd.read_csv(run_dir / "leaderboard.csv")
    assert set(board.model) == {"lightgbm", "xgboost", "nn", "ensemble"}
    assert {"val_roc_auc", "test_roc_auc", "fit_seconds", "predict_seconds", "device"} <= set(board.columns)

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    models = mlflow.search_logged_models(
        experiment_ids=[run.info.experiment_id], filter_string=f"source_run_id = '{run.info.run_id}'",
        output_format="list",
    )
    assert {m.name for m in models} == {"lightgbm", "xgboost", "nn", "ensemble"}
    frame = pd.read_parquet(ROOT / "pipeline" / "datasets" / "adult.parquet").head(20)
    for m in models:
        predictions = mlflow.pyfunc.load_model(m.model_uri).predict(frame.drop(columns=["income"]))
        assert (pd.Series(predictions) == frame["income"].values).mean() > 0.7


def test_the_default_run_logs_each_models_memory_peak_and_estimate(default_run):
    _, (run,) = job_runs(default_run[0])
    metrics = run.data.metrics
    for model in ("lightgbm", "xgboost", "nn"):
        assert metrics[f"{model}/peak_ram_mb"] > 100
        assert metrics[f"{model}/estimate_ram_mb"] > 100


def test_regression_with_all_models(cli, tmp_path):
    proc = cli("data=california", "model=all", *small(), check=True)
    assert "Leaderboard (rmse)" in proc.stdout
    _, (run,) = job_runs(tmp_path)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["ensemble/val_rmse"] <= min(run.data.metrics[f"{m}/val_rmse"] for m in ("lightgbm", "xgboost", "nn"))
    assert run.data.tags["pipeline.eval_metric"] == "rmse"


def test_two_job_multirun(cli, tmp_path):
    cli("-m", "model=lightgbm,xgboost", "data.max_rows=3000", check=True)
    client, all_runs = runs(tmp_path)
    parents = [r for r in all_runs if r.data.tags.get("pipeline.sweep") == "parent"]
    jobs = [r for r in all_runs if "pipeline.run_dir" in r.data.tags]
    assert len(parents) == 1 and len(jobs) == 2
    # named by what varies, short (the full overrides in a tag); the parent by its sweep
    assert {r.info.run_name for r in jobs} == {"lightgbm", "xgboost"}
    assert {r.data.tags["pipeline.overrides"] for r in jobs} == {"model=lightgbm data.max_rows=3000",
                                                                 "model=xgboost data.max_rows=3000"}
    assert parents[0].info.run_name == "sweep: lightgbm,xgboost"
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in jobs)
    assert all(r.info.status == "FINISHED" for r in all_runs)
    assert len({r.info.experiment_id for r in all_runs}) == 1
    # every job logs the same metric names under its own model, and the same best/ keys
    assert all("best/val_roc_auc" in r.data.metrics and "best/model" in r.data.tags for r in jobs)
    assert "best/val_roc_auc" in parents[0].data.metrics
    assert parents[0].data.metrics["val_roc_auc"] == max(r.data.metrics["val_roc_auc"] for r in jobs)


def test_a_sweep_whose_job_fails_leaves_no_run_running(cli, tmp_path):
    searchpath = user_config(tmp_path, "model", "boom", "boom:\n  _target_: tests.fault_models.FailingModel\n")
    proc = cli("-m", "model=lightgbm,boom", searchpath, "allowed_targets=[tests.]", "executor.max_retries=0",
               "data.max_rows=800", env=FAULT_ENV)
    assert proc.returncode != 0
    _, all_runs = runs(tmp_path)
    statuses = {r.info.run_name: r.info.status for r in all_runs}
    assert "RUNNING" not in statuses.values(), statuses
    (parent,) = [r for r in all_runs if r.data.tags.get("pipeline.sweep") == "parent"]
    assert parent.info.status == "FAILED"


def test_a_sweep_with_a_tracking_config_error_reports_it_once_from_the_job(cli):
    proc = cli("-m", "model=lightgbm", "tracking.register_model=x", "tracking.log_models=false", "dry_run=true")
    assert proc.returncode == 2
    assert "tracking.register_model='x' registers a logged model" in proc.stderr
    assert "Callback" not in proc.stderr and "Traceback" not in proc.stderr  # the sweep callback leaves it to the job


@pytest.mark.parametrize(
    "args, expected",
    [
        (["model=no_such_kind"], ["Could not find 'model/no_such_kind'", "lightgbm", "xgboost", "nn", "gbm_gpu"]),
        (["data.label=incme"], ["data.label='incme' is not a column", "did you mean 'income'", "columns: age"]),
        (["data=csv", "data.path=nowhere.csv", "data.label=y"], ["data.path=", "nowhere.csv", "no such file"]),
        (["hardware=4gpu"], ["To append to your default list use +hardware=4gpu"]),
        (["+hardware=4gpu", "model=gbm_gpu"], ["hardware.num_gpus=4 but this machine has no CUDA device", "dry_run=true"]),
        (["model=nn", "+model.nn.params.dropuot=0.2"], ["model.nn.params.dropuot", "did you mean 'dropout'"]),
        # no hardware node without a profile (Hydra would stop with an AssertionError's traceback)
        (["hardware.num_gpus=2"], ["hardware.num_gpus=2: hardware is not in the defaults",
                                   "+hardware=1gpu hardware.num_gpus=2",
                                   "profiles: 1gpu, 2gpu, 4gpu, 8gpu, cpu"]),
        # a key added with + where the schema has none (kept by OmegaConf where nothing reads it)
        (["+time_limit=60"], ["time_limit=60 is not a key of the config (did you mean 'time_limit_s'?)"]),
    ],
)
def test_bad_input_is_one_clear_message(cli, args, expected):
    proc = cli(*args, "tracking=none")
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    for piece in expected:
        assert piece in text
    assert "Traceback" not in text


def test_dry_run_gbm_gpu_on_4gpu_box(cli, tmp_path):
    proc = cli("+hardware=4gpu", "hardware.num_cpus=8", "parallelism.fit.num_cpus=4", "model=gbm_gpu",
               "model.lightgbm.device=cuda", "model.xgboost.device=cuda", "dry_run=true", check=True)
    assert "nothing was fitted" in proc.stdout
    (run_dir,) = run_dirs(tmp_path)
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["hardware"]["num_gpus"] == 4 and plan["hardware"]["devices"] == [0, 1, 2, 3]
    models = {m["name"]: m for m in plan["models"]}
    assert set(models) == {"lightgbm", "xgboost"}
    assert all(m["fit"]["num_gpus"] == 1 for m in models.values())
    fits = [t for t in plan["tasks"] if t["kind"] == "fit"]
    assert sorted(t["device_ids"] for t in fits) == [[0], [1]]  # the two GBMs run at once on two devices
    assert {t["kind"] for t in plan["tasks"]} == {"fit", "bag", "ensemble", "evaluate"}
    assert not (tmp_path / "outputs" / "mlflow.db").exists()
    assert not (run_dir / "tasks").exists()


def test_dry_run_gbm_gpu_each_fit_taking_the_whole_box_runs_in_turn(cli, tmp_path):
    cli("+hardware=4gpu", "model=gbm_gpu", "model.lightgbm.device=cuda", "model.xgboost.device=cuda", "dry_run=true",
        check=True)  # 2 CPUs here: each fit takes both
    (run_dir,) = run_dirs(tmp_path)
    fits = [t for t in json.loads((run_dir / "plan.json").read_text())["tasks"] if t["kind"] == "fit"]
    assert [(t["wave"], t["device_ids"]) for t in fits] == [(0, [0]), (1, [0])]


def test_dry_run_nn_on_8gpu_box(cli, tmp_path):
    cli("+hardware=8gpu", "hardware.num_cpus=16", "model=nn", "model.nn.device=cuda", "parallelism=bag8",
        "dry_run=true", check=True)
    (run_dir,) = run_dirs(tmp_path)
    plan = json.loads((run_dir / "plan.json").read_text())
    (nn,) = plan["models"]
    assert nn["num_folds"] == 8 and nn["fit"]["num_gpus"] == 1 and nn["folds_parallel"] == 8
    fits = [t for t in plan["tasks"] if t["kind"] == "fit"]
    assert sorted(d for t in fits for d in t["device_ids"]) == list(range(8))
    ensemble = next(t for t in plan["tasks"] if t["id"] == "ensemble")
    assert ensemble["depends_on"] == ["bag/nn/t0"]


def test_dry_run_on_the_8gpu_profile_takes_this_machines_cpus(cli, tmp_path):
    proc = cli("+hardware=8gpu", "model=nn", "dry_run=true", check=True)
    assert "hardware.num_cpus is unset" in proc.stdout + proc.stderr
    (run_dir,) = run_dirs(tmp_path)
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["hardware"]["num_cpus"] == len(os.sched_getaffinity(0))


def test_dry_run_reproduces_the_seed_example(cli, tmp_path):
    cli("+hardware=4gpu", "hardware.num_cpus=32", "model=nn", "model.nn.device=cuda", "parallelism.num_folds=2",
        "parallelism.bag.num_cpus=10", "parallelism.bag.num_gpus=2", "parallelism.fit.num_cpus=4",
        "parallelism.fit.num_gpus=0.5", "hpo.num_trials=2", "dry_run=true", check=True)
    (run_dir,) = run_dirs(tmp_path)
    plan = json.loads((run_dir / "plan.json").read_text())
    (nn,) = plan["models"]
    assert (nn["trials_parallel"], nn["folds_parallel"]) == (2, 2)
    assert nn["used"] == {"num_cpus": 16, "num_gpus": 2.0}
    fits = [t for t in plan["tasks"] if t["kind"] == "fit"]
    assert len(fits) == 4 and {t["wave"] for t in fits} == {0}
    assert {t["id"]: t["depends_on"] for t in plan["tasks"] if t["kind"] == "bag"} == {
        "bag/nn/t0": ["fit/nn/t0/f0", "fit/nn/t0/f1"],
        "bag/nn/t1": ["fit/nn/t1/f0", "fit/nn/t1/f1"],
    }


def test_start_up_imports_no_heavy_library():
    code = (
        "import sys, pipeline.__main__, pipeline.run, pipeline.settings, pipeline.graph.plan, pipeline.report;"
        "heavy = [m for m in ('torch', 'mlflow', 'lightgbm', 'xgboost', 'ray', 'optuna', 'sklearn') if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_help_lists_the_groups(cli):
    proc = cli("--help", check=True)
    for group in ("data:", "model:", "parallelism:", "hpo:", "executor:", "tracking:", "hardware:"):
        assert group in proc.stdout


def test_stacking_under_a_time_limit_needs_no_parallelism_spelt_out(cli, tmp_path):
    """`time_limit_s=20 stack_levels=1` was refused for want of folds; stacking now makes each model a 5-fold
    bag and says so, in a dry run of the command line as in a run."""
    proc = cli("time_limit_s=20", "stack_levels=1", "model=lightgbm", "data.max_rows=2000", "dry_run=true",
               "tracking=none", check=True)
    assert "stack_levels=1 with no parallelism chosen: each model is a 5-fold bag" in proc.stdout
    (run_dir,) = [p.parent for p in tmp_path.glob("outputs/**/plan.json")]
    plan = json.loads((run_dir / "plan.json").read_text())
    assert {m["num_folds"] for m in plan["models"]} == {5}
