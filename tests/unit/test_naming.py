"""Run names lead with what varies; parameters are what a user compares."""

from pipeline.tracking import naming


def test_a_sweep_job_is_named_by_its_swept_overrides_first():
    swept = naming.swept_keys(["data.max_rows=4000", "model=lightgbm,xgboost", "seed=range(2)"])
    assert swept == ["model", "seed"]
    own = naming.shown_overrides(["data.max_rows=4000", "seed=1", "model=xgboost", "tracking.uri=http://u:pw@h"])
    # what the runs list shows of a name is its first 18 characters or so: the swept values, short
    assert naming.job_name(own, swept) == "xgboost s=1"
    # the Optuna sweeper's search space is swept too, given flat or nested (as the command line nests it)
    assert naming.swept_keys(["model=lightgbm"], {"model.lightgbm.params.learning_rate": "interval(0.01, 0.3)"}) \
        == ["model.lightgbm.params.learning_rate"]
    nested = {"model": {"lightgbm": {"params": {"learning_rate": "tag(log, interval(0.01, 0.3))",
                                                "num_leaves": "range(15, 63)"}}}}
    swept = naming.swept_keys(["model=lightgbm"], nested)
    assert swept == ["model.lightgbm.params.learning_rate", "model.lightgbm.params.num_leaves"]
    trial = ["model=lightgbm", "data.max_rows=4000", "model.lightgbm.params.learning_rate=0.0646642271741456",
             "model.lightgbm.params.num_leaves=31"]
    assert naming.job_name(trial, swept) == "lr=0.065 leaves=31"
    # two keys that would read the same keep the word before
    both = ["model.lightgbm.params.learning_rate", "model.nn.params.learning_rate"]
    assert naming.job_name(["model.nn.params.learning_rate=0.001", "model.lightgbm.params.learning_rate=0.1"],
                           both) == "lightgbm.lr=0.1 nn.lr=0.001"
    # a sweep that varies none of a job's overrides: its overrides, short
    assert naming.job_name(["data.max_rows=4000"], []) == "rows=4000"


def test_a_sweep_parent_is_named_by_its_sweep_or_its_study():
    assert naming.sweep_name(["model=lightgbm,xgboost", "seed=0,1", "data.max_rows=4000"]) \
        == "sweep: lightgbm,xgboost × s=0,1"
    optuna = {"_target_": "hydra_plugins.pipeline_optuna_sweeper.optuna_sweeper.OptunaSweeper",
              "study_name": "adult-lgbm", "direction": ["maximize", "minimize"]}
    assert naming.sweep_name(["model=lightgbm"], optuna, ["val_score", "fit_seconds"]) \
        == "adult-lgbm (optuna: maximize val_score, minimize fit_seconds)"
    unnamed = {**optuna, "study_name": None, "direction": "maximize",
               "params": {"model": {"lightgbm": {"params": {"learning_rate": "interval(0.01, 0.3)",
                                                            "num_leaves": "range(15, 63)"}}}}}
    assert naming.sweep_name(["model=lightgbm"], unnamed) == "lr × leaves (optuna: maximize val_score)"
    secret = naming.sweep_name(["data.path=s3://b/f.csv?sig=abc,s3://b/g.csv?sig=abc", "data.storage_options.token=t"])
    assert "abc" not in secret


def test_a_single_run_is_named_by_its_models():
    assert naming.single_name(["lightgbm", "xgboost"], ["model=gbm", "parallelism=bag5"]) == "lightgbm+xgboost parallelism=bag5"
    assert naming.single_name(["lightgbm"], ["parallelism.num_folds=5"]) == "lightgbm folds=5"
    assert naming.single_name(["nn"], []) == "nn"


def test_parameters_are_what_a_user_compares():
    flat = {
        "model.lightgbm._target_": "pipeline.models.lightgbm.LightGBMModel",
        "model.lightgbm.params.learning_rate": 0.05, "model.lightgbm.search_space.learning_rate.low": 0.01,
        "model.lightgbm.resources.num_cpus": None, "allowed_targets": [], "data.drop_columns": [],
        "data.features": 20, "data.categorical_features": 0, "data.name": "adult", "seed": 1,
        "tracking.keep_alive_s": 600, "tracking._target_": "pipeline.tracking.factory.mlflow_tracker",
        "hpo._target_": "pipeline.searchers.NoSearch", "hpo.pruning": True,
        "data._target_": "pipeline.data_sources.BundledSource", "data.label": "income",
        "model.lightgbm.device": "cpu", "model.lightgbm.params.early_stopping_round": 50,
        "model.lightgbm.params.verbosity": -1,
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


def test_constant_plumbing_params_are_left_to_the_config_artifact_unless_swept():
    flat = {"data.label": "income", "model.lightgbm.device": "cpu",
            "model.lightgbm.params.early_stopping_round": 50, "model.lightgbm.params.num_leaves": 31}
    kinds = {"hpo": "none", "executor": "local"}
    assert set(naming.comparable_params(flat, ["lightgbm"], kinds, False, "bundled")) == {
        "model", "hpo", "executor", "model.lightgbm.params.num_leaves"}
    swept = naming.comparable_params(flat, ["lightgbm"], kinds, False, "bundled", ["model.lightgbm.device"])
    assert swept["model.lightgbm.device"] == "cpu"
    assert "model.lightgbm.params.early_stopping_round" not in swept
