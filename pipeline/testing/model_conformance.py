"""The model conformance suite: what every model kind must honour, for pytest.

A kind's test module subclasses `ModelKindConformance` and names its class, its conf/model file and a
misspelt parameter; pytest then runs every check on it:

    class TestCatBoost(ModelKindConformance):
        model_class = CatBoostModel
        config = "catboost"                      # conf/model/catboost.yaml, configuring model.catboost
        typo = ("deptth", "depth")               # a misspelt parameter and the name the error suggests

The checks: the profile is declared, complete and frozen; the parameter checks; fit and predict on a
binary, a multiclass and a regression table (bundled and synthetic data) with the profile's quick
params, and with columns named like keyword arguments (`self`); early stopping; clone, seed and pickle
round trips; hpo=auto's portfolio and the search space; the memory estimate on the CPU and on a GPU;
the device choice with and without a calibration, and the library parameters a device gives; and,
through one CLI run shared by the kinds a session collects (`model=[a,b,...]`), a 3-fold bag of each,
its batch prediction (`python -m pipeline.predict predictor=<kind>`) and its MLflow pyfunc model with
its requirements, loaded in a process that can import the engine only from the code the model ships.
Needs pytest (the `test` extra).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import ClassVar, Optional

import pytest

from pipeline.models.base import FitContext, Placement, TabularModel
from pipeline.models.profile import ModelProfile

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ("binary", "multiclass", "regression")
_COLLECTED: dict[str, type] = {}  # conf/model name -> model class, of every subclass imported (collected)
_RUNS: dict[tuple, tuple] = {}  # the kinds of a shared engine run -> (its folder, its run directory)


def _datasets() -> dict:
    from pipeline.config import DataConf
    from pipeline.data import load

    synthetic = "pipeline.data_sources.SyntheticSource"
    return {
        "binary": load(DataConf(max_rows=3000), ROOT),
        "multiclass": load(DataConf(name="s", _target_=synthetic, rows=1500, features=8, classes=3,
                                    categorical_features=2), ROOT),
        "regression": load(DataConf(name="c", path="california_housing", label="MedHouseVal", max_rows=2000),
                           ROOT),
    }


class ModelKindConformance:
    """Checks every model kind passes; subclass with `model_class`, `config` and `typo` set."""

    model_class: ClassVar[type[TabularModel]]
    config: ClassVar[str]  # the conf/model file that configures model.<config>
    typo: ClassVar[tuple[str, str]]  # (a misspelt parameter, the parameter the error names)
    params: ClassVar[Optional[dict]] = None  # the fits' params; None: the conf file's, with the quick ones

    # ---- fixtures
    @pytest.fixture(scope="class")
    def datasets(self):
        return _datasets()

    @pytest.fixture(scope="class")
    def fit_params(self) -> dict:
        if self.params is not None:
            return dict(self.params)
        import yaml

        conf = yaml.safe_load((ROOT / "conf" / "model" / f"{self.config}.yaml").read_text())[self.config]
        return {**conf.get("params", {}), **dict(self.model_class.profile.quick)}

    @pytest.fixture(scope="class")
    def fitted(self, datasets, fit_params) -> dict:
        return {problem: self.fit(datasets[problem], fit_params) for problem in PROBLEMS}

    def fit(self, data, params: dict, seed: int = 0) -> TabularModel:
        model = self.model_class(params, self.config)
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=seed)
        return model.fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)

    # ---- the profile
    def test_profile_is_declared_complete_and_frozen(self):
        profile = self.model_class.__dict__.get("profile")
        assert isinstance(profile, ModelProfile), "the class declares its own ModelProfile as `profile`"
        assert profile.library and profile.modules and profile.distributions
        assert all(isinstance(group, tuple) and group and all(isinstance(d, str) for d in group)
                   for group in profile.distributions)
        assert callable(profile.memory) and callable(profile.gpu_params)
        assert 0.0 <= profile.thread_serial_share <= 1.0 and profile.gpu_fit_cpus >= 1
        assert profile.max_gpus_per_fit is None or profile.max_gpus_per_fit >= 1
        assert profile.quick, "quick params make the kind's smoke runs and these checks short"
        assert all(isinstance(c, dict) for c in profile.portfolio)
        assert all(len(kind) == 2 for kind in profile.shared_objects)
        if profile.costs is not None:
            assert profile.costs.is_file() and profile.cost_name
            assert all(k.startswith(f"{profile.cost_name}/") for k in profile.calibration().learners)
        with pytest.raises(dataclasses.FrozenInstanceError):
            profile.library = "changed"

    def test_distributions_and_modules_are_installed(self):
        import importlib.util

        from pipeline.tracking.models import pinned

        profile = self.model_class.profile
        assert all(importlib.util.find_spec(m) is not None for m in profile.modules)
        for group in profile.distributions:
            pinned(group[0], group[1:])  # raises PackageNotFoundError when none of them is installed

    # ---- parameters
    def test_a_misspelt_parameter_is_a_config_error_naming_the_right_one(self):
        from pipeline.errors import ConfigError

        wrong, right = self.typo
        with pytest.raises(ConfigError, match=rf"model\.m\.params\.{wrong} .*did you mean '{right}'"):
            self.model_class.check_params("m", {wrong: 3}, "binary")

    def test_its_configured_params_pass_the_checks(self, fit_params):
        for problem in PROBLEMS:
            self.model_class.check_params("m", fit_params, problem)

    # ---- fitting and predicting
    @pytest.mark.parametrize("problem", PROBLEMS)
    def test_fits_and_predicts(self, datasets, fitted, problem):
        import numpy as np

        from pipeline import metrics

        data, model = datasets[problem], fitted[problem]
        X_test, y_test = data.X.iloc[data.test_idx], data.y[data.test_idx]
        proba = model.predict_proba(X_test)
        if problem == "regression":
            assert proba.shape == (len(X_test),)
            assert metrics.METRICS["r2"](y_test, proba) > 0.3
        else:
            assert proba.shape == (len(X_test), data.num_classes)
            np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-5)
            assert set(np.unique(model.predict(X_test))) <= set(range(data.num_classes))
            assert metrics.METRICS["accuracy"](y_test, proba) > 1.0 / data.num_classes + 0.1
        assert model.fit_seconds_ > 0 and model.device_ == "cpu"
        assert model.history_, "the validation fold's scores, round by round (early stopping's record)"

    def test_columns_named_like_keyword_arguments_fit_and_predict(self, datasets, fit_params):
        """A table's columns may have any name, `self` too (a yes/no column of a mortgage table): a
        library call that takes the columns as keyword arguments (`DataFrame.assign`) fails on it."""
        data = datasets["binary"]
        names = {data.categorical[0]: "self", data.numeric[0]: "kwargs"}
        renamed = dataclasses.replace(data, X=data.X.rename(columns=names),
                                      categorical=[names.get(c, c) for c in data.categorical],
                                      numeric=[names.get(c, c) for c in data.numeric])
        model = self.fit(renamed, fit_params)
        proba = model.predict_proba(renamed.X.iloc[renamed.test_idx[:50]])
        assert proba.shape == (50, 2)

    def test_early_stopping_on_the_validation_fold(self, datasets):
        """With its configured params (early stopping on) a fit on the binary table stops before its cap;
        the refit's params carry the length it stopped at, and a time limit prices the refit at that length,
        not at the fold fit's, which ran its patience past it (`refit_share`)."""
        import yaml

        conf = yaml.safe_load((ROOT / "conf" / "model" / f"{self.config}.yaml").read_text())[self.config]
        model = self.fit(datasets["binary"], conf["params"])
        refit = model.refit_params([model])
        key, length = next(iter(refit.items()))
        assert key in conf["params"] and 1 <= length < conf["params"][key]
        assert 0 < model.refit_share() < 1

    def test_clone_is_unfitted_and_independent(self, datasets, fitted):
        model = fitted["binary"]
        twin = model.clone()
        assert not hasattr(twin, "fit_seconds_")
        assert twin.params == model.params and twin.params is not model.params
        with pytest.raises(RuntimeError, match="not fitted"):
            twin.predict(datasets["binary"].X.iloc[:5])

    def test_same_seed_same_predictions(self, datasets, fitted, fit_params):
        import numpy as np

        data = datasets["binary"]
        X = data.X.iloc[data.test_idx[:100]]
        again = self.fit(data, fit_params)
        np.testing.assert_allclose(again.predict_proba(X), fitted["binary"].predict_proba(X), rtol=1e-6)

    @pytest.mark.parametrize("problem", PROBLEMS)
    def test_pickles_and_predicts_the_same(self, datasets, fitted, problem):
        import pickle

        import numpy as np

        data, model = datasets[problem], fitted[problem]
        X = data.X.iloc[data.test_idx[:50]]
        again = pickle.loads(pickle.dumps(model))
        np.testing.assert_allclose(again.predict_proba(X), model.predict_proba(X), rtol=1e-5, atol=1e-6)

    # ---- search: hpo's space and hpo=auto's portfolio
    def test_hpo_auto_asks_its_params_then_its_portfolio_then_its_search_space(self):
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        import pipeline.config  # noqa: F401 - the schemas
        from pipeline.hpo import TrialSource
        from pipeline.settings import read_settings

        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
                cfg = compose("config", overrides=[f"model={self.config}", "hpo=auto", "time_limit_s=60"])
        finally:
            GlobalHydra.instance().clear()
        settings = read_settings(cfg)
        (spec,) = settings.models
        space, portfolio = spec.search_space, self.model_class.profile.portfolio
        assert space, f"conf/model/{self.config}.yaml declares a search_space"
        assert all(k in space and space[k].contains(v) for config in portfolio for k, v in config.items())
        source = TrialSource(settings.conf.hpo, {spec.name: space}, {spec.name: spec.params}, "maximize",
                             portfolios={spec.name: portfolio})
        asked = [source.params(spec.name, t) for t in range(len(portfolio) + 2)]
        own = {k: v for k, v in spec.params.items() if k in space and space[k].contains(v)}
        laid = [{**own, **config} for config in portfolio]  # an entry changes what it names of the params
        assert asked[0] == own
        assert own not in laid, "a portfolio entry repeating the configured params wastes a trial"
        assert asked[1:len(portfolio) + 1] == laid
        assert all(space[k].contains(v) for k, v in asked[-1].items())

    # ---- planning: memory and devices
    def test_memory_estimate_on_the_cpu_and_a_gpu(self, fit_params):
        from pipeline.memory.estimates import Estimate, FitShape
        from pipeline.memory.shape import DataShape

        small = FitShape.of(DataShape(20_000, numeric=10, categorical=4, classes=2), 1, 0.2, 0.2)
        large = FitShape.of(DataShape(2_000_000, numeric=10, categorical=4, classes=2), 1, 0.2, 0.2)
        cpu = self.model_class.memory_estimate(fit_params, small, False)
        assert isinstance(cpu, Estimate) and cpu.gpu == 0 and cpu.parts
        assert all(isinstance(v, int) and v >= 0 for v in cpu.parts.values())
        bigger = self.model_class.memory_estimate(fit_params, large, False)
        assert sum(bigger.parts.values()) > sum(cpu.parts.values())  # grows with the rows
        on_gpu = self.model_class.on_device(fit_params, "cuda")
        if self.model_class.gpu_request(on_gpu)[0]:
            assert self.model_class.memory_estimate(on_gpu, small, True).gpu > 0

    def cpu_only(self) -> bool:
        """Whether the kind's library has builds for the CPU alone (its profile's accelerators)."""
        return self.model_class.profile.accelerators == frozenset({"cpu"})

    def test_the_device_parameters_follow_the_device(self, fit_params):
        cls = self.model_class
        if self.cpu_only():  # a GPU is refused by name before any plan; auto stays on the CPU
            from pipeline.accelerators import check_device
            from pipeline.errors import ConfigError

            with pytest.raises(ConfigError, match=r"model\.m\.device=cuda: .* has no build that runs on"):
                check_device("cuda", "model.m.device", cls.profile)
            assert check_device("cpu", "model.m.device", cls.profile) == "cpu"
            assert not cls.gpu_request(fit_params)[0] and cls.on_device(fit_params, "cuda") == fit_params
            return
        assert not cls.gpu_request(cls.on_device(fit_params, "cpu"))[0]
        assert cls.gpu_request(cls.on_device(fit_params, "cuda"))[0]
        assert cls.explicit_device(cls.on_device(fit_params, "cuda")) in (None, ("cuda", cls.gpu_request(
            cls.on_device(fit_params, "cuda"))[2]))
        if cls.profile.max_gpus_per_fit == 1:
            assert isinstance(cls.profile.gpu_params((1,)), dict)

    def test_device_choice_without_a_gpu_or_a_calibration_is_the_cpu(self, monkeypatch, fit_params):
        from pipeline.planning.device_choice import choose
        from pipeline.errors import ConfigError
        from pipeline.memory.estimates import FitShape
        from pipeline.memory.shape import DataShape

        cls, fit = self.model_class, FitShape.of(DataShape(10_000_000, 40, 10, 2), 1, 0.2, 0.2)
        reason = choose("m", "auto", cls, fit_params, fit, Fraction(0), 16).reason
        assert reason == "cpu: auto, and the hardware has no GPU"
        with pytest.raises(ConfigError, match=r"model\.m\.device=cuda but the hardware has no GPU"):
            choose("m", "cuda", cls, fit_params, fit, Fraction(0), 2)
        if not self.cpu_only():  # a CPU-only kind's cuda is refused before (check_device)
            assert choose("m", "cuda", cls, fit_params, fit, Fraction(1), 2).device == "cuda"
        uncalibrated = dataclasses.replace(cls.profile, costs=None)
        monkeypatch.setattr(cls, "profile", uncalibrated)
        choice = choose("m", "auto", cls, fit_params, fit, Fraction(1), 16)
        assert choice.device == "cpu" and "has no measured fit times" in choice.reason

    def test_device_choice_with_a_calibration_follows_the_estimate(self, monkeypatch, tmp_path, fit_params):
        """A calibration whose GPU learner is 100x faster puts a large fit on the GPU; 100x slower, on the
        CPU."""
        from pipeline.planning.device_choice import choose
        from pipeline.memory.estimates import FitShape
        from pipeline.memory.shape import DataShape

        cls, fit = self.model_class, FitShape.of(DataShape(10_000_000, 40, 10, 2), 1, 0.2, 0.2)
        if self.cpu_only():  # no GPU learner to measure: the device is the CPU before any estimate
            assert choose("m", "cpu", cls, fit_params, fit, Fraction(1), 16).device == "cpu"
            return
        cpu_key, gpu_key, _ = cls.cost_learners(fit_params)
        work = max(cls.fit_work(fit_params, fit), 1e-6)
        for gpu_seconds, expected in ((0.01, "cuda"), (100.0, "cpu")):
            path = tmp_path / f"{expected}.yaml"
            path.write_text(f"learners:\n  {cpu_key}: {{device: cpu, threads: 16, points: [[{work}, 1.0]]}}\n"
                            f"  {gpu_key}: {{device: cuda, points: [[{work}, {gpu_seconds}]]}}\n")
            monkeypatch.setattr(cls, "profile", dataclasses.replace(cls.profile, costs=path))
            assert choose("m", "auto", cls, fit_params, fit, Fraction(1), 16).device == expected

    # ---- through the engine: a bag, batch prediction, the MLflow pyfunc
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "config" in cls.__dict__:
            _COLLECTED[cls.config] = cls.model_class

    @pytest.fixture(scope="class")
    def engine_run(self, tmp_path_factory):
        """One run of the CLI bagging every kind pytest collected (`model=[a,b,...]`), shared by their
        classes: (its folder, its run directory)."""
        kinds = tuple(sorted({**_COLLECTED, self.config: self.model_class}.items()))
        if kinds not in _RUNS:
            cwd = tmp_path_factory.mktemp("conformance-run")
            quick = [f"model.{name}.params.{k}={v}" for name, cls in kinds for k, v in cls.profile.quick]
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
            args = [f"model=[{','.join(name for name, _ in kinds)}]", "data.max_rows=2000",
                    "parallelism.num_folds=3", *quick]
            proc = subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=cwd, env=env,
                                  capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            _RUNS[kinds] = cwd, Path(proc.stdout.rsplit("run directory ", 1)[1].split()[0])
        return _RUNS[kinds]

    def test_bags_through_the_engine(self, engine_run):
        import pandas as pd

        _, run_dir = engine_run
        board = pd.read_csv(run_dir / "leaderboard.csv").set_index("model")
        assert board.loc[self.config, "num_folds"] == 3 and board.loc[self.config, "val_roc_auc"] > 0.75
        assert (run_dir / "predictors" / f"{self.config}.pkl").is_file()

    def test_batch_prediction_from_the_run(self, engine_run):
        import pandas as pd

        cwd, run_dir = engine_run
        args = [f"source={run_dir}", f"predictor={self.config}", "data.max_rows=200",
                f"output={self.config}.csv"]
        proc = subprocess.run([sys.executable, "-m", "pipeline.predict", *args], cwd=cwd, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        out = pd.read_csv(cwd / f"{self.config}.csv")
        assert len(out) > 0 and list(out.filter(like="proba_").columns) == ["proba_<=50K", "proba_>50K"]

    def test_the_logged_pyfunc_predicts_and_requires_the_library(self, engine_run):
        import pandas as pd

        from pipeline.tracking.models import load_logged

        cwd, _ = engine_run
        model, names = load_logged(f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}", self.config)
        frame = pd.read_parquet(ROOT / "pipeline" / "datasets" / "adult.parquet").head(50)
        predictions = model.predict(frame.drop(columns=["income"]))
        assert (pd.Series(predictions) == frame["income"].values).mean() > 0.7
        assert all(names & set(group) for group in self.model_class.profile.distributions)

    def test_the_logged_model_loads_with_the_engine_code_it_ships_alone(self, engine_run, tmp_path):
        """A model ships the engine modules its pickle names and what they import, not the whole package: a
        process that can import the engine only from that copy loads it and predicts as the run's did."""
        import pandas as pd

        from pipeline.testing.shipped_code_check import load_with_shipped_code, outside_shipped_code

        cwd, _ = engine_run
        frame = pd.read_parquet(ROOT / "pipeline" / "datasets" / "adult.parquet").head(50)
        frame.drop(columns=["income"]).to_parquet(tmp_path / "rows.parquet")
        loaded = load_with_shipped_code(f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}", self.config,
                                        tmp_path / "rows.parquet", tmp_path)
        module = self.model_class.__module__
        assert outside_shipped_code(loaded) == []
        assert module in loaded["modules"] or not module.startswith("pipeline.")
        assert (pd.Series(loaded["predictions"]) == frame["income"].values).mean() > 0.7
        shipped = Path(loaded["code"]) / "pipeline"
        assert not list(shipped.rglob("*.parquet")) and not (shipped / "conf").exists()
        assert sum(f.stat().st_size for f in shipped.rglob("*") if f.is_file()) < 0.7 * sum(
            f.stat().st_size for f in (ROOT / "pipeline").rglob("*.py"))
