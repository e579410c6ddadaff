"""The fit-time estimates per library, learner and device, and the device each model gets from them."""

from fractions import Fraction as F

import pytest

from pipeline.planning.device_choice import choose, estimate
from pipeline.errors import ConfigError
from pipeline.fit_cost import Learner
from pipeline.memory.estimates import FitShape
from pipeline.memory.shape import DataShape
from pipeline.models import LightGBMModel, TorchMLPModel, XGBoostModel
from pipeline.resources import Request, Resources
from pipeline.planning.allocation import allocate


def fit_of(rows, features, classes=2):
    """One holdout fit of a table, split as the engine's defaults split it (test 0.2, validation 0.2)."""
    return FitShape.of(DataShape(rows, features - 2, 2, classes), 1, 0.2, 0.2)


def test_each_learner_reproduces_the_figures_it_was_calibrated_on():
    learners = [lr for cls in (LightGBMModel, XGBoostModel, TorchMLPModel)
                for lr in cls.profile.calibration().learners.values()]
    assert len(learners) == 7
    for learner in learners:
        for work, seconds in learner.points:
            assert learner.seconds(work, learner.threads or 1) == pytest.approx(seconds + learner.start_s)


def test_the_estimate_is_piecewise_linear_and_proportional_beyond_the_last_point():
    learner = Learner("x/cpu", "cpu", ((1.0, 2.0), (3.0, 10.0)), threads=4)
    assert learner.seconds(0.5, 4) == pytest.approx(1.0)  # through the origin
    assert learner.seconds(2.0, 4) == pytest.approx(6.0)
    assert learner.seconds(6.0, 4) == pytest.approx(20.0)  # the last point's seconds per unit of work
    assert learner.seconds(2.0, 1, serial=0.0) == pytest.approx(24.0)  # 4 threads' figure on one thread


def test_fewer_cpu_threads_make_the_cpu_estimate_longer_as_amdahl_says():
    fit = fit_of(1_000_000, 20)
    sixteen = estimate(XGBoostModel, {"num_boost_round": 200}, fit, 16)
    two = estimate(XGBoostModel, {"num_boost_round": 200}, fit, 2)
    assert sixteen.cpu_s == pytest.approx(4.79, rel=0.01)  # the H100 box's measurement, 16 threads
    assert two.cpu_s > 1.8 * sixteen.cpu_s and two.gpu_s == sixteen.gpu_s


def test_auto_puts_xgboost_on_cuda_at_ten_million_rows():
    choice = choose("xgboost", "auto", XGBoostModel, {"num_boost_round": 1000}, fit_of(10_000_000, 50), F(1), 16)
    assert choice.device == "cuda"
    assert choice.reason.startswith("cuda: est. ") and "s on CUDA vs " in choice.reason
    assert choice.reason.endswith("s on 16 CPU threads")


def test_auto_keeps_lightgbm_off_opencl_at_145k_rows():
    """bio_train's shape: the OpenCL learner took 3x as long as 16 CPU threads there."""
    choice = choose("lightgbm", "auto", LightGBMModel, {"num_iterations": 200}, fit_of(145_751, 74), F(1), 16)
    assert choice.device == "cpu"
    assert "on OpenCL" in choice.reason


def test_auto_keeps_every_gbm_on_the_cpu_for_adult_on_sixteen_threads():
    adult = fit_of(48_842, 14)
    for cls, params in ((LightGBMModel, {"num_iterations": 1000}), (XGBoostModel, {"num_boost_round": 1000})):
        assert choose("m", "auto", cls, params, adult, F(1), 16).device == "cpu"


def test_auto_puts_the_network_on_cuda():
    choice = choose("nn", "auto", TorchMLPModel, {"max_epochs": 30}, fit_of(48_842, 14), F(1), 16)
    assert choice.device == "cuda"


def test_an_explicit_device_parameter_wins_and_warns_where_the_estimate_says_it_loses():
    warnings = []
    choice = choose("xgboost", "auto", XGBoostModel, {"device": "cuda", "num_boost_round": 1000},
                    fit_of(48_842, 14), F(1), 16, warnings.append)
    assert choice.device == "cuda"
    assert "model.xgboost.params.device=cuda set in params" in choice.reason
    assert len(warnings) == 1 and "the estimate says cpu is faster" in warnings[0]
    warnings.clear()
    choose("xgboost", "auto", XGBoostModel, {"device": "cuda"}, fit_of(10_000_000, 50), F(1), 16, warnings.append)
    assert warnings == []  # it wins there


def test_auto_stays_on_the_cpu_without_a_gpu_or_a_known_shape_or_a_measured_learner(monkeypatch):
    assert choose("x", "auto", XGBoostModel, {}, fit_of(10_000_000, 50), F(0), 16).reason == \
        "cpu: auto, and the hardware has no GPU"
    assert "size is unknown" in choose("x", "auto", XGBoostModel, {}, None, F(1), 16).reason
    import pipeline.models.lightgbm_build as build

    monkeypatch.setattr(build, "lightgbm_cuda_available", lambda: True)
    choice = choose("lightgbm", "auto", LightGBMModel, {}, fit_of(10_000_000, 50), F(1), 16)
    assert choice.device == "cpu" and choice.reason.endswith("s on CUDA")  # measured on an H200: slower there
    monkeypatch.setattr(LightGBMModel, "cost_learners",
                        classmethod(lambda cls, params: ("lightgbm/cpu", "lightgbm/rocm", "ROCm")))
    choice = choose("lightgbm", "auto", LightGBMModel, {}, fit_of(10_000_000, 50), F(1), 16)
    assert choice.device == "cpu" and "lightgbm/rocm has no measured fit times" in choice.reason


def test_device_cuda_without_a_gpu_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"model.xgboost.device=cuda but the hardware has no GPU"):
        choose("xgboost", "cuda", XGBoostModel, {}, fit_of(1000, 5), F(0), 2)


def test_the_library_parameters_follow_the_device(monkeypatch):
    assert XGBoostModel.on_device({}, "cuda") == {"device": "cuda"}
    assert XGBoostModel.on_device({"device": "cpu"}, "cuda") == {"device": "cpu"}  # the user's own stays
    assert LightGBMModel.on_device({}, "cuda") == {"device_type": "gpu"}  # the wheel: OpenCL
    assert LightGBMModel.on_device({}, "cpu") == {}
    assert TorchMLPModel.on_device({}, "cpu") == {"device": "cpu"}
    import pipeline.models.lightgbm_build as build

    monkeypatch.setattr(build, "lightgbm_cuda_available", lambda: True)
    assert LightGBMModel.on_device({}, "cuda") == {"device_type": "cuda"}


class TestPacking:
    """Derived fractional GPU shares pack on one device only where the calibration does not say packing loses."""

    def test_network_fits_are_not_packed_and_the_plan_says_why(self):
        nn = TorchMLPModel.needs("nn", {"device": "cuda"})
        a = allocate(Resources(16, F(1)), Request(), Request(), nn, num_folds=5, num_trials=1,
                     gpu_capacities=[F(1)])
        assert a.fit.num_gpus == 1 and a.folds_parallel == 1
        assert "1.03x" in a.packing_reason and "whole device" in a.packing_reason
        assert "under the 1.10x" in a.packing_reason

    def test_gbm_fits_still_pack(self):
        xgb = XGBoostModel.needs("xgboost", {"device": "cuda"})
        a = allocate(Resources(16, F(1)), Request(), Request(), xgb, num_folds=5, num_trials=1,
                     gpu_capacities=[F(1)])
        assert a.fit.num_gpus == F(1, 5) and a.packing_reason == ""

    def test_a_share_the_user_asks_for_is_kept(self):
        nn = TorchMLPModel.needs("nn", {"device": "cuda"})
        a = allocate(Resources(16, F(1)), Request(), Request.parse(None, 0.5, "parallelism.fit"), nn, num_folds=2,
                     num_trials=1, gpu_capacities=[F(1)])
        assert a.fit.num_gpus == F(1, 2) and a.folds_parallel == 2
