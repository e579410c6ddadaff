"""Run names lead with what varies; parameters are what a user compares."""

from pipeline.tracking import naming


def test_a_sweep_job_is_named_by_its_swept_overrides_first():
    swept = naming.swept_keys(["data.max_rows=4000", "model=lightgbm,xgboost", "seed=range(2)"])
    assert swept == ["model", "seed"]
    own = naming.shown_overrides(["data.max_rows=4000", "seed=1", "model=xgboost", "tracking.uri=http://u:pw@h"])
    assert naming.job_name(own, swept) == "model=xgboost seed=1 data.max_rows=4000"
    # the Optuna sweeper's search space is swept too
    assert naming.swept_keys(["model=lightgbm"], {"model.lightgbm.params.learning_rate": "interval(0.01, 0.3)"}) \
        == ["model.lightgbm.params.learning_rate"]


def test_a_sweep_parent_is_named_by_its_sweep_or_its_study():
    assert naming.sweep_name(["model=lightgbm,xgboost", "seed=0,1", "data.max_rows=4000"]) \
        == "sweep: model=lightgbm,xgboost × seed=0,1"
    optuna = {"_target_": "hydra_plugins.pipeline_optuna_sweeper.optuna_sweeper.OptunaSweeper",
              "study_name": "adult-lgbm", "direction": ["maximize", "minimize"]}
    assert naming.sweep_name(["model=lightgbm"], optuna, ["val_score", "fit_seconds"]) \
        == "optuna: adult-lgbm (maximize val_score, minimize fit_seconds)"
    secret = naming.sweep_name(["data.path=s3://b/f.csv?sig=abc,s3://b/g.csv?sig=abc", "data.storage_options.token=t"])
    assert "abc" not in secret


def test_a_single_run_is_named_by_its_models():
    assert naming.single_name(["lightgbm", "xgboost"], ["model=gbm", "parallelism=bag5"]) == "lightgbm+xgboost parallelism=bag5"
    assert naming.single_name(["nn"], []) == "nn"


def test_parameters_are_what_a_user_compares():
    flat = {
        "model.lightgbm._target_": "pipeline.models.lightgbm.LightGBMModel",
        "model.lightgbm.params.learning_rate": 0.05, "model.lightgbm.search_space.learning_rate.low": 0.01,
        "model.lightgbm.resources.num_cpus": None, "allowed_targets": [], "data.drop_columns": [],
        "data.features": 20, "data.categorical_features": 0, "data.name": "adult", "seed": 1,
        "tracking.keep_alive_s": 600, "tracking._target_": "pipeline.tracking.factory.mlflow_tracker",
        "hpo._target_": "pipeline.searchers.NoSearch", "hpo.pruning": True,
        "data._target_": "pipeline.data_sources.BundledSource",
    }
    kinds = {"hpo": "none", "executor": "local"}
    assert naming.comparable_params(flat, ["lightgbm"], kinds, False, "bundled") == {
        "model": "lightgbm", "model.lightgbm.params.learning_rate": 0.05, "data.name": "adult", "seed": 1,
        "hpo": "none", "executor": "local",
    }
    synthetic = naming.comparable_params(flat, ["lightgbm"], kinds, False, "synthetic")
    assert synthetic["data.features"] == 20 and synthetic["data.categorical_features"] == 0
    searched = naming.comparable_params({**flat, "hpo._target_": "pipeline.searchers.TpeSearch"}, ["lightgbm"],
                                        {**kinds, "hpo": "tpe"}, True, "bundled")
    assert searched["hpo.pruning"] is True and searched["hpo"] == "tpe"
