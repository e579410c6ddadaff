"""A fit on a GPU holds only the CPU threads its host side needs, and a model on the CPUs runs beside it."""

from fractions import Fraction as F

import pytest

from pipeline.config import HardwareConf
from pipeline.graph.plan import Admission, build_plan
from pipeline.hardware import Machine, resolve
from pipeline.models import LightGBMModel, TorchMLPModel, XGBoostModel
from pipeline.resources import Request
from pipeline.planning.allocation import allocate, cpus_beside_gpu_fits

XGB_CUDA = XGBoostModel.needs("xgboost", {"device": "cuda"})
LGB_CPU = LightGBMModel.needs("lightgbm", {})
FIT = Request.parse(None, None, "parallelism.fit")
BAG = Request.parse(None, None, "parallelism.bag")
GPU_BOX = Machine(16, gpu_tokens=("0",), gpu_names=("sim",), gpu_memory=(80 * 2**30,), simulated=True)


def box(cpus=16, gpus=1):
    return resolve(HardwareConf(name="box", num_cpus=cpus, num_gpus=gpus), Machine(2), dry_run=True)


def test_each_model_states_the_threads_of_its_gpu_fits():
    assert XGB_CUDA.gpu_fit_cpus == 1
    assert TorchMLPModel.needs("nn", {"device": "cuda"}).gpu_fit_cpus == 1
    assert LightGBMModel.needs("lightgbm", {"device_type": "cuda"}).gpu_fit_cpus == 1
    assert LightGBMModel.needs("lightgbm", {"device_type": "gpu"}).gpu_fit_cpus == LightGBMModel.OPENCL_FIT_CPUS


@pytest.mark.parametrize("folds, fit_cpus, share, parallel", [(1, 1, F(1), 1), (5, 1, F(1, 5), 5)])
def test_a_gpu_fit_derives_its_own_few_cpus(folds, fit_cpus, share, parallel):
    hw = box()
    a = allocate(hw.total, BAG, FIT, XGB_CUDA, num_folds=folds, num_trials=1,
                 gpu_capacities=list(hw.capacities().values()))
    assert (a.fit.num_cpus, a.fit.num_gpus, a.folds_parallel) == (fit_cpus, share, parallel)


def test_cpus_set_by_the_user_win_over_the_models_figure():
    hw = box()
    a = allocate(hw.total, BAG, Request.parse(6, None, "parallelism.fit"), XGB_CUDA, num_folds=1, num_trials=1)
    assert a.fit.num_cpus == 6


def test_the_gpu_fit_and_the_cpu_fit_are_admitted_together():
    hw = box()
    gpu = allocate(hw.total, BAG, FIT, XGB_CUDA, num_folds=1, num_trials=1)
    beside = cpus_beside_gpu_fits(hw.total.num_cpus, [gpu])
    assert beside == 15
    cpu = allocate(type(hw.total)(beside, hw.total.num_gpus), BAG, FIT, LGB_CPU, num_folds=1, num_trials=1)
    plan = build_plan(hw, [gpu, cpu])
    waves = {t.model: t.wave for t in plan.fit_tasks}
    assert waves == {"xgboost": 0, "lightgbm": 0}
    admission = Admission(hw, [gpu, cpu])
    first, second = sorted(plan.fit_tasks, key=lambda t: t.model != "xgboost")
    assert admission.try_admit(first) is not None and admission.try_admit(second) is not None
    assert admission.pool.free_cpus == 0


def test_the_plan_runs_the_cpu_model_beside_the_gpu_model(compose):
    from pipeline.run import make_plan
    from pipeline.settings import read_settings

    cfg = compose(["+hardware=1gpu", "hardware.num_cpus=16", "model=gbm_gpu", "model.lightgbm.device=cpu", "model.xgboost.device=cuda",
                   "tracking=none", "dry_run=true"])
    plan = make_plan(read_settings(cfg).plan_input(machine=GPU_BOX))
    fits = {t.model: t for t in plan.fit_tasks}
    assert fits["xgboost"].resources.num_cpus == 1 and fits["xgboost"].device_ids == (0,)
    assert fits["lightgbm"].resources.num_cpus == 15 and fits["lightgbm"].device_ids == ()
    assert fits["xgboost"].wave == fits["lightgbm"].wave == 0


def test_a_cpu_request_larger_than_what_is_left_runs_after_the_gpu_fits(compose):
    from pipeline.run import make_plan
    from pipeline.settings import read_settings

    cfg = compose(["+hardware=1gpu", "hardware.num_cpus=16", "model=gbm_gpu", "model.lightgbm.device=cpu", "model.xgboost.device=cuda",
                   "+model.lightgbm.resources.num_cpus=16", "tracking=none", "dry_run=true"])
    fits = {t.model: t for t in make_plan(read_settings(cfg).plan_input(machine=GPU_BOX)).fit_tasks}
    assert fits["lightgbm"].resources.num_cpus == 16 and fits["lightgbm"].wave != fits["xgboost"].wave
