"""Property test over hardware x parallelism x models, with every level either set or derived.

Consistent user-set values must plan; an inconsistent one must be rejected with a message naming a
key the user set. A plan never puts more on a wave or a device than the box has, and a derived GPU
share is a whole device or 1/k of one.
"""

from fractions import Fraction as F

from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipeline.errors import ResourceError
from pipeline.config import HardwareConf
from pipeline.hardware import Machine, resolve
from pipeline.graph.plan import build_plan
from pipeline.resources import ModelNeeds, Request
from pipeline.planning.allocation import allocate

MODELS = {
    "nn": ModelNeeds("nn", True, False, None, "params.device=auto", "PyTorch"),
    "lightgbm_cpu": ModelNeeds("lightgbm", False, False, 1, "params.device_type=cpu", "LightGBM"),
    "xgboost_gpu": ModelNeeds("xgboost", True, True, 1, "params.device=cuda", "XGBoost"),
}
TOTAL_GPUS = st.sampled_from([F(0), F(1, 2), F(1), F(2), F(3), F(4), F(8)])
GPU_VALUES = st.sampled_from([F(0), F(1, 4), F(1, 3), F(1, 2), F(3, 4), F(1), F(2), F(4)])


def maybe(values):
    return st.one_of(st.none(), values)


def expected_rejections(total_cpus, total_gpus, bag, fit, needs, bagging) -> set[str]:
    """The user-set keys an inconsistent configuration may be rejected for (every one it violates; the
    engine names the first it checks); empty when the configuration is consistent."""
    if needs.requires_gpu and total_gpus == 0:
        return {"hardware.num_gpus"}
    keys = set()
    if bag[0] is not None and bag[0] > total_cpus:
        keys.add("parallelism.bag.num_cpus")
    if bag[1] is not None and bag[1] > total_gpus:
        keys.add("parallelism.bag.num_gpus")
    if keys:  # the bag is checked against the total before the fit is checked against the bag
        return keys
    parent_cpus = bag[0] if bagging and bag[0] is not None else total_cpus
    parent_gpus = bag[1] if bagging and bag[1] is not None else total_gpus
    if needs.requires_gpu and fit[1] is None and parent_gpus == 0:
        keys.add("parallelism.bag.num_gpus")
    if fit[0] is not None and fit[0] > parent_cpus:
        keys.add("parallelism.fit.num_cpus")
    if fit[1] is not None and fit[1] > parent_gpus:
        keys.add("parallelism.fit.num_gpus")
    if needs.requires_gpu and fit[1] == 0:
        keys.add("parallelism.fit.num_gpus")
    if fit[1] is not None and needs.max_gpus_per_fit is not None and fit[1] > needs.max_gpus_per_fit:
        keys.add("parallelism.fit.num_gpus")
    return keys


@settings(max_examples=400, deadline=None)
@example(  # a fit over the bag's CPUs and a GPU model under a zero-GPU bag: either key may be named
    total_cpus=1, total_gpus=F(1), bag_cpus=None, bag_gpus=F(0), fit_cpus=2, fit_gpus=None,
    model="xgboost_gpu", folds=2, trials=1, sequential=False,
)
@given(
    total_cpus=st.integers(1, 64),
    total_gpus=TOTAL_GPUS,
    bag_cpus=maybe(st.integers(1, 64)),
    bag_gpus=maybe(GPU_VALUES),
    fit_cpus=maybe(st.integers(1, 16)),
    fit_gpus=maybe(GPU_VALUES),
    model=st.sampled_from(sorted(MODELS)),
    folds=st.integers(0, 8),
    trials=st.integers(1, 6),
    sequential=st.booleans(),
)
def test_consistent_values_plan_and_rejections_name_a_set_key(
    total_cpus, total_gpus, bag_cpus, bag_gpus, fit_cpus, fit_gpus, model, folds, trials, sequential
):
    needs = MODELS[model]
    hw = resolve(HardwareConf(name="box", num_cpus=total_cpus, num_gpus=total_gpus), Machine(1), dry_run=True)
    bag = Request.parse(bag_cpus, bag_gpus, "parallelism.bag")
    fit = Request.parse(fit_cpus, fit_gpus, "parallelism.fit")
    expected = expected_rejections(total_cpus, total_gpus, (bag_cpus, bag_gpus), (fit_cpus, fit_gpus), needs,
                                   folds >= 2)
    try:
        a = allocate(hw.total, bag, fit, needs, num_folds=folds, num_trials=trials, sequential=sequential,
                     gpu_capacities=list(hw.capacities().values()))
    except ResourceError as exc:
        assert expected, f"consistent values were rejected: {exc}"
        assert any(f"{key}=" in str(exc) for key in expected), f"the rejection names none of {expected}: {exc}"
        return
    assert not expected, f"expected a rejection naming one of {sorted(expected)}"

    if fit_gpus is None and a.fit.num_gpus > 0:  # derived: a whole device or 1/k of one
        assert a.fit.num_gpus == 1 or a.fit.num_gpus.numerator == 1, a.fit
    plan = build_plan(hw, [a])
    assert a.used.num_cpus <= total_cpus and a.used.num_gpus <= total_gpus
    waves = {}
    for t in plan.expanded().fit_tasks:  # every trial: those the plan lists and those it repeats
        waves.setdefault(t.wave, []).append(t)
    for tasks in waves.values():
        assert sum(t.resources.num_cpus for t in tasks) <= total_cpus
        per_device = {}
        for t in tasks:
            for d, s in zip(t.device_ids, t.gpu_shares):
                per_device[d] = per_device.get(d, 0) + s
            assert sum(t.gpu_shares, F(0)) == t.resources.num_gpus
        assert all(v <= min(1, total_gpus) for v in per_device.values())
        assert len(tasks) <= a.folds_parallel * a.trials_parallel
    assert plan.num_fits == len(plan.expanded().fit_tasks) == max(1, folds) * trials
