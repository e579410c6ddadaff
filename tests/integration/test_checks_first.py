"""Errors a user can cause are found before the plan prints, each naming every culprit and the fix."""

import pytest

pytestmark = pytest.mark.slow


def test_a_misspelt_label_is_an_error_before_the_plan(cli):
    proc = cli("data.label=incom", "dry_run=true")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "data.label='incom' is not a column of data.path (did you mean 'income'?)" in proc.stderr
    assert "Plan:" not in proc.stdout and "features" not in proc.stdout  # nothing of the plan was shown


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_columns_are_checked_against_the_files_header_before_reading_it(cli, tmp_path, kind):
    import pandas as pd

    frame = pd.DataFrame({"age": range(40), "city": ["a", "b"] * 20, "churn": [0, 1] * 20})
    path = tmp_path / f"t.{kind}"
    frame.to_csv(path, index=False) if kind == "csv" else frame.to_parquet(path)
    proc = cli(f"data={kind}", f"data.path={path.name}", "data.label=churm", "model=lightgbm", "dry_run=true")
    assert "data.label='churm' is not a column of data.path (did you mean 'churn'?)" in proc.stderr
    assert "Plan:" not in proc.stdout
    proc = cli(f"data={kind}", f"data.path={path.name}", "data.label=churn", "data.drop_columns=[town]",
               "model=lightgbm", "dry_run=true")
    assert "data.drop_columns names ['town'], which are not columns" in proc.stderr and "Plan:" not in proc.stdout
    assert cli(f"data={kind}", f"data.path={path.name}", "data.label=churn", "model=lightgbm", "dry_run=true",
               check=True).returncode == 0


def test_gpu_models_on_a_box_without_gpus_are_all_named_with_the_overrides_that_fix_them(cli):
    asked = ["model=gbm_gpu", "+model.lightgbm.params.device_type=gpu", "model.xgboost.device=cuda", "dry_run=true"]
    proc = cli(*asked)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    message = proc.stderr
    assert "lightgbm (params.device_type=gpu)" in message and "xgboost (device=cuda)" in message
    fixes = ["model.lightgbm.params.device_type=cpu", "model.xgboost.device=cpu"]
    assert all(fix in message for fix in fixes) and "+hardware=1gpu" in message
    assert cli(*asked, *fixes, check=True).returncode == 0  # the fix it names works


def test_an_experiment_made_before_it_was_tagged_opens_on_its_training_runs(tmp_path):
    import mlflow

    from pipeline.tracking.store import EXPERIMENT_KIND, TRAINING, ensure_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    made = mlflow.MlflowClient(uri).create_experiment("pipeline")
    assert EXPERIMENT_KIND not in mlflow.MlflowClient(uri).get_experiment(made).tags
    assert ensure_experiment(uri, "pipeline", None) == made
    assert mlflow.MlflowClient(uri).get_experiment(made).tags[EXPERIMENT_KIND] == TRAINING
    mlflow.MlflowClient(uri).set_experiment_tag(made, EXPERIMENT_KIND, "genai_development")  # a user's own choice
    ensure_experiment(uri, "pipeline", None)
    assert mlflow.MlflowClient(uri).get_experiment(made).tags[EXPERIMENT_KIND] == "genai_development"
