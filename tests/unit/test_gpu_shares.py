"""Derived GPU shares pack (a whole device or 1/k of one) and spread over the level's devices."""

from fractions import Fraction as F

import pytest

from pipeline.config import HardwareConf
from pipeline.hardware import Machine, resolve
from pipeline.levels import derived_gpu_share, ineffective_bag
from pipeline.graph.plan import build_plan
from pipeline.resources import ModelNeeds, Request
from pipeline.planning.allocation import allocate

GBM_GPU = ModelNeeds("lightgbm", True, True, 1, "params.device_type=gpu", "LightGBM")


def plan_for(cpus, gpus, folds, trials=1, bag=(None, None)):
    hw = resolve(HardwareConf(name="box", num_cpus=cpus, num_gpus=gpus), Machine(2), dry_run=True)
    a = allocate(hw.total, Request.parse(*bag, "parallelism.bag"), Request.parse(None, None, "parallelism.fit"),
                 GBM_GPU, num_folds=folds, num_trials=trials, gpu_capacities=list(hw.capacities().values()))
    return a, build_plan(hw, [a])


@pytest.mark.parametrize("level, concurrent, share", [
    (F(4), 5, F(1, 2)), (F(2), 3, F(1, 2)), (F(4), 2, F(1)), (F(4), 4, F(1)), (F(1), 3, F(1, 3)),
    (F(2), 8, F(1, 4)), (F(1, 2), 2, F(1, 4)), (F(1, 2), 1, F(1, 2)), (F(0), 3, F(0)),
])
def test_derived_share(level, concurrent, share):
    assert derived_gpu_share(level, concurrent) == share


def test_five_folds_on_four_gpus_and_32_cpus_plan():
    """+hardware=4gpu hardware.num_cpus=32 model=gbm_gpu parallelism=bag5: 0.8 GPU per fit could not pack."""
    a, plan = plan_for(32, 4, 5)
    assert a.fit.num_gpus == F(1, 2) and a.folds_parallel == 5
    assert {t.wave for t in plan.fit_tasks} == {0}


def test_three_folds_on_two_gpus_plan():
    a, _ = plan_for(32, 2, 3)
    assert a.fit.num_gpus == F(1, 2) and a.folds_parallel == 3


def test_two_cpus_give_each_running_fit_its_own_device():
    """Only two fits run at once on 2 CPUs: each takes a whole device, not 0.8 of GPUs 0 and 1."""
    a, plan = plan_for(2, 4, 5)
    assert a.fit.num_gpus == 1 and a.folds_parallel == 2
    first = [t for t in plan.fit_tasks if t.wave == 0]
    assert sorted(t.device_ids for t in first) == [(0,), (1,)]


def test_bag_level_gpus_are_what_the_folds_share():
    a, _ = plan_for(32, 4, 4, trials=2, bag=(None, 2))
    assert a.fit.num_gpus == F(1, 2) and a.folds_parallel == 4 and a.trials_parallel == 2


def test_bag_set_under_holdout_is_named_as_ineffective():
    (msg,) = ineffective_bag(None, F(2), 1)
    assert msg.startswith("parallelism.bag.num_gpus=2 has no effect: parallelism.num_folds=1")
    assert ineffective_bag(8, F(2), 2) == []
