"""Memory planning: the data's shape before loading, the estimates, the caps and the admission."""

from fractions import Fraction as F
from pathlib import Path

import pandas as pd
import pytest

from pipeline.config import DataConf, HardwareConf
from pipeline.errors import HardwareError, ResourceError
from pipeline.hardware import Machine, resolve
from pipeline.memory.budget import Advice, Capacity, MemoryPlan, MemoryRequest, capacity, plan_model
from pipeline.memory.estimates import GiB, MiB, Estimate, FitShape
from pipeline.models.memory import network_size
from pipeline.nn.options import largest_batch
from pipeline.memory.measure import PeakMemory
from pipeline.memory.shape import DataShape, data_shape
from pipeline.graph.plan import build_plan
from pipeline.resources import ModelNeeds, Request
from pipeline.planning.allocation import allocate

CPU_MODEL = ModelNeeds("m", False, False, 1, "params.device=cpu", "Lib")
NN_AUTO = ModelNeeds("nn", True, False, None, "params.device=auto")
NO_ADVICE = Advice(lambda room, gpu: None)


def box(cpus, gpus=0):
    return resolve(HardwareConf(name="box", num_cpus=cpus, num_gpus=gpus), Machine(cpus), dry_run=True)


def alloc(hw, folds=5, trials=1, fit=Request(), needs=CPU_MODEL):
    return allocate(hw.total, Request(), fit, needs, num_folds=folds, num_trials=trials,
                    gpu_capacities=list(hw.capacities().values()))


def cap(ram_gb=None, gpu_gb=None):
    return Capacity(None if ram_gb is None else int(ram_gb * GiB), "hardware.memory_gb",
                    None if gpu_gb is None else int(gpu_gb * GiB), "hardware.gpu_memory_gb", driver=0)


# --------------------------------------------------------------------------- shape before loading


def test_bundled_adult_shape_comes_from_parquet_metadata():
    shape = data_shape(DataConf(), Path.cwd())
    assert (shape.rows, shape.numeric, shape.categorical) == (48_842, 6, 8)
    assert shape.source == "parquet metadata"


def test_max_rows_and_a_separate_test_file_shape_the_rows(tmp_path):
    frame = pd.DataFrame({"a": range(500), "b": ["x", "y"] * 250, "target": [0, 1] * 250})
    frame.to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[:100].to_parquet(tmp_path / "test.parquet")
    spec = DataConf(name="t", _target_="pipeline.data_sources.CsvSource", path="train.csv", label="target", test_path="test.parquet", max_rows=300)
    shape = data_shape(spec, tmp_path)
    assert (shape.rows, shape.test_rows, shape.numeric, shape.categorical) == (400, 100, 1, 1)


def test_synthetic_shape_is_the_generators_declared_size():
    spec = DataConf(name="s", _target_="pipeline.data_sources.SyntheticSource", rows=1_000_000, features=20, categorical_features=2, classes=3)
    shape = data_shape(spec, Path.cwd())
    assert (shape.rows, shape.numeric, shape.categorical, shape.classes) == (1_000_000, 18, 2, 3)


def test_a_remote_file_has_no_shape_before_loading():
    assert data_shape(DataConf(name="r", _target_="pipeline.data_sources.ParquetSource", path="s3://bucket/t.parquet", label="y"), Path.cwd()) is None


def test_fit_shape_of_folds_and_holdout():
    data = DataShape(rows=1000, numeric=4, categorical=0)
    folds = FitShape.of(data, 5, 0.2, 0.2)
    assert (folds.train, folds.held_out, folds.test) == (640, 160, 200)
    holdout = FitShape.of(data, 1, 0.2, 0.25)
    assert (holdout.train, holdout.held_out, holdout.test) == (600, 200, 200)


# --------------------------------------------------------------------------- estimates


def test_a_small_tables_trees_are_bounded_by_its_rows_not_the_round_cap():
    """A boosted tree has at most a leaf per min_data_in_leaf rows (LightGBM) or per row (XGBoost): at a
    cap of 10,000 rounds, a 100-row fit's trees are not estimated as 10,000 full-size trees."""
    from pipeline.models.memory import lightgbm, xgboost

    def trees(estimator, params, rows):
        return estimator(params, FitShape(rows, rows // 4, 0, DataShape(rows=rows, numeric=5, categorical=0)),
                         False).parts["trees"]

    gbm = {"num_iterations": 10_000, "num_leaves": 255, "min_data_in_leaf": 20}
    assert trees(lightgbm, gbm, 100) == 10_000 * 5 * 120  # 100 rows / 20 a leaf
    assert trees(lightgbm, gbm, 1_000_000) == 10_000 * 255 * 120
    deep = {"num_boost_round": 10_000, "max_depth": 10}
    assert trees(xgboost, deep, 100) == 10_000 * 100 * 40
    assert trees(xgboost, deep, 1_000_000) == 10_000 * 1024 * 40


def test_network_size_counts_what_the_network_builds():
    from pipeline.nn.network import TabularMLP

    data = DataShape(rows=100, numeric=5, categorical=3, classes=4, cardinality=20)
    params = {"hidden_sizes": [64, 32], "max_embedding_dim": 16}
    count, width = network_size(params, data)
    net = TabularMLP(5, [21, 21, 21], 4, (64, 32), 0.1, 16)
    assert count == sum(p.numel() for p in net.parameters())
    assert width == net.mlp[0].in_features


# One fit's measured peak RAM (MiB, the engine's own record: memory.json) on a 2-core Linux box, Parquet
# files of N rows x 20 float32 features and a binary label (the scale benchmark's tables), holdout split,
# the model's configured parameters with these rounds or epochs; the GBMs imported with scikit-learn (a run
# that is not lean: pipeline.lean_imports; a lean one holds SKLEARN_BYTES less, checked in test_lean_imports).
MEASURED_PEAKS = {
    ("lightgbm", 200_000, 300): 289.4, ("lightgbm", 2_000_000, 300): 677.7, ("lightgbm", 10_000_000, 20): 2291.7,
    ("xgboost", 200_000, 100): 294.8, ("xgboost", 2_000_000, 100): 688.6, ("xgboost", 10_000_000, 20): 2345.2,
    ("nn", 200_000, 1): 573.9, ("nn", 2_000_000, 1): 908.5, ("nn", 10_000_000, 1): 2403.3,
}
LENGTH = {"lightgbm": "num_iterations", "xgboost": "num_boost_round", "nn": "max_epochs"}


@pytest.mark.parametrize(("model", "rows", "length"), list(MEASURED_PEAKS))
def test_cpu_estimates_are_within_15_percent_of_measured_peaks(model, rows, length):
    from omegaconf import OmegaConf

    from pipeline.memory.estimates import common_parts
    from pipeline.models import LightGBMModel, TorchMLPModel, XGBoostModel

    cls = {"lightgbm": LightGBMModel, "xgboost": XGBoostModel, "nn": TorchMLPModel}[model]
    params = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[2] / "conf" / "model" / f"{model}.yaml"))
    params = {**params[model]["params"], LENGTH[model]: length}
    fit = FitShape.of(DataShape(rows, numeric=20, categorical=0, classes=2), 1, 0.2, 0.2)
    own = cls.memory_estimate(params, fit, False)
    estimate = sum({**common_parts(fit, [cls.profile], lean=False), **own.parts}.values())
    assert 0.85 <= estimate / MiB / MEASURED_PEAKS[(model, rows, length)] <= 1.15


def test_each_model_kind_estimates_what_its_library_builds():
    fit = FitShape.of(DataShape(2_000_000, numeric=20, categorical=0, classes=2), 1, 0.2, 0.2)
    from pipeline.models import LightGBMModel, TorchMLPModel, XGBoostModel

    parts = {cls.__name__: set(cls.memory_estimate({}, fit, False).parts)
             for cls in (LightGBMModel, XGBoostModel, TorchMLPModel)}
    assert {"fold_copies", "bin_sample", "binned"} <= parts["LightGBMModel"]
    assert {"fold_copies", "quantized"} <= parts["XGBoostModel"] and "bin_sample" not in parts["XGBoostModel"]
    assert {"tensors", "evaluation", "cpu_runtime"} <= parts["TorchMLPModel"]


def test_largest_batch_is_a_power_of_two_within_the_budget():
    assert largest_batch(per_row=1000, budget=300_000, cap=16_384) == 256
    assert largest_batch(per_row=1000, budget=10**12, cap=16_384) == 16_384
    assert largest_batch(per_row=1000, budget=10, cap=16_384) == 1


def test_gpu_estimate_of_xgboost_grows_with_rows():
    from pipeline.models import XGBoostModel

    small = FitShape.of(DataShape(100_000, 20, 0), 1, 0.2, 0.2)
    large = FitShape.of(DataShape(10_000_000, 20, 0), 1, 0.2, 0.2)
    assert XGBoostModel.memory_estimate({"device": "cuda"}, small, True).gpu < 1 * GiB
    assert XGBoostModel.memory_estimate({"device": "cuda"}, large, True).gpu > 1.5 * GiB
    assert XGBoostModel.memory_estimate({}, large, False).gpu == 0


# --------------------------------------------------------------------------- the caps


def test_ram_caps_parallel_folds_and_says_so():
    hw = box(4)
    a = alloc(hw, folds=5, fit=Request(1, None))
    assert a.folds_parallel == 4
    capped = plan_model(a, Estimate(3 * GiB), MemoryRequest(), MemoryRequest(), cap(ram_gb=7), None, NO_ADVICE)
    assert capped.folds_parallel == 2 and capped.trials_parallel == 1
    assert "RAM" in capped.memory.limited[0] and "2 at once instead of 4" in capped.memory.limited[0]


def test_a_stacked_models_fits_reserve_what_its_widest_fit_needs():
    a = alloc(box(4), folds=5, fit=Request(1, None))
    first, above = Estimate(1 * GiB), Estimate(3 * GiB)
    planned = plan_model(a, first, MemoryRequest(), MemoryRequest(), cap(ram_gb=7), None, NO_ADVICE, above=above)
    assert planned.memory.ram == 3 * GiB and planned.folds_parallel == 2  # 1 GiB fits alone would run 4 at once
    assert planned.memory.at(1) is first and planned.memory.at(2) is above and planned.memory.at(3) is above


def test_enough_ram_changes_nothing():
    a = alloc(box(4), folds=5, fit=Request(1, None))
    same = plan_model(a, Estimate(1 * GiB), MemoryRequest(), MemoryRequest(), cap(ram_gb=64), None, NO_ADVICE)
    assert (same.folds_parallel, same.memory.limited) == (4, ())


def test_the_prepared_table_is_reserved_once_not_per_fit():
    """Workers map one data file and the driver's part of the capacity holds the table: four fits of
    1 GiB beside a 2 GiB table fit in 4.5 GiB for fits, which four whole estimates of 3 GiB would not."""
    a = alloc(box(4), folds=5, fit=Request(1, None))
    estimate = Estimate(3 * GiB, parts={"table": 2 * GiB, "model": 1 * GiB})
    planned = plan_model(a, estimate, MemoryRequest(), MemoryRequest(), cap(ram_gb=4.5), None, NO_ADVICE)
    assert (planned.folds_parallel, planned.memory.ram, planned.memory.limited) == (4, 1 * GiB, ())


def test_ram_caps_trials_after_folds():
    a = alloc(box(8), folds=2, trials=4, fit=Request(1, None))
    assert (a.folds_parallel, a.trials_parallel) == (2, 4)
    capped = plan_model(a, Estimate(1 * GiB), MemoryRequest(), MemoryRequest(), cap(ram_gb=5), None, NO_ADVICE)
    assert (capped.folds_parallel, capped.trials_parallel) == (2, 2)


def test_a_fit_larger_than_the_ram_is_an_error_naming_what_to_change():
    a = alloc(box(2), folds=1)
    advice = Advice(lambda room, gpu: 12345, "model.m.params.batch_size")
    with pytest.raises(ResourceError, match=r"model 'm': one fit needs about 3.00 GiB of RAM .*hardware.memory_gb"
                                            r".*data.max_rows=12345.*batch_size"):
        plan_model(a, Estimate(3 * GiB, parts={"model": 3 * GiB}), MemoryRequest(), MemoryRequest(), cap(ram_gb=2),
                   None, advice)


def test_a_stated_fit_limit_is_reserved_and_an_estimate_above_it_is_an_error():
    a = alloc(box(4), folds=4, fit=Request(1, None))
    stated = MemoryRequest.parse(4, None, "parallelism.fit")
    reserved = plan_model(a, Estimate(1 * GiB), stated, MemoryRequest(), cap(ram_gb=9), None, NO_ADVICE)
    assert reserved.memory.ram == 4 * GiB and reserved.folds_parallel == 2
    with pytest.raises(ResourceError, match=r"parallelism.fit.memory_gb=4 allows"):
        plan_model(a, Estimate(5 * GiB), stated, MemoryRequest(), cap(ram_gb=64), None, NO_ADVICE)


def test_a_bag_memory_limit_caps_its_folds():
    a = alloc(box(4), folds=4, fit=Request(1, None))
    bag = MemoryRequest.parse(2.5, None, "parallelism.bag")
    capped = plan_model(a, Estimate(1 * GiB), MemoryRequest(), bag, cap(ram_gb=64), None, NO_ADVICE)
    assert capped.folds_parallel == 2


def test_gpu_memory_raises_a_share_until_the_fits_on_a_device_fit():
    hw = box(16, 1)

    def reallocate(share):
        return alloc(hw, folds=8, fit=Request(2, share, gpus_key="parallelism.fit.num_gpus"), needs=NN_AUTO)

    a = reallocate(F(1, 4))
    assert a.folds_parallel == 4
    raised = plan_model(a, Estimate(GiB, gpu=5 * GiB), MemoryRequest(), MemoryRequest(), cap(gpu_gb=16), reallocate,
                        NO_ADVICE)
    assert raised.fit.num_gpus == F(1, 3) and raised.folds_parallel == 3
    assert "each fit takes 0.333333 GPU instead of 0.25" in raised.memory.limited[0]
    with pytest.raises(ResourceError, match=r"on each of its GPUs but hardware.gpu_memory_gb gives 16.0 GiB"):
        plan_model(a, Estimate(GiB, gpu=17 * GiB), MemoryRequest(), MemoryRequest(), cap(gpu_gb=16), reallocate,
                   NO_ADVICE)


def test_a_gpu_share_given_to_a_fit_that_runs_on_the_cpu_reserves_no_gpu_memory():
    """device=auto chose the CPU for a model given parallelism.fit.num_gpus=0.5 (warned about when allocated):
    its estimate holds no GPU memory, and planning a box of known GPU memory keeps the share as it is."""
    hw = box(16, 1)
    a = alloc(hw, folds=2, fit=Request(1, F(1, 2), gpus_key="parallelism.fit.num_gpus"), needs=NN_AUTO)
    planned = plan_model(a, Estimate(GiB, gpu=0), MemoryRequest(), MemoryRequest(), cap(gpu_gb=80), None, NO_ADVICE)
    assert planned.fit.num_gpus == F(1, 2) and planned.memory.gpu == 0 and planned.memory.limited == ()


def test_the_idle_gpu_warning_names_the_auto_choice(compose, caplog):
    """The warning says auto chose the CPU and why, not a params.device the user never set."""
    from pipeline.planning.planner import make_plan
    from pipeline.settings import read_settings

    cfg = compose(["+hardware=1gpu", "model=nn_gpu", "parallelism.num_folds=2", "parallelism.fit.num_gpus=0.5",
                   "parallelism.fit.num_cpus=1", "data.max_rows=2000", "hardware.num_cpus=16",
                   "hardware.memory_gb=64", "hardware.gpu_memory_gb=80", "dry_run=true"])
    settings = read_settings(cfg)
    with caplog.at_level("WARNING"):
        plan = make_plan(settings.plan_input(Path.cwd(), None, False))
    (alloc_nn,) = plan.allocations
    assert alloc_nn.device == "cpu" and alloc_nn.fit.num_gpus == F(1, 2)
    assert "model.nn.device=auto chose cpu: est." in caplog.text
    assert "params.device=cpu" not in caplog.text


def test_admission_keeps_two_models_from_sharing_ram_they_do_not_have():
    """Each model alone runs two folds at once, but both models' fits together exceed the RAM."""
    hw = box(4)
    plans = []
    for name in ("a", "b"):
        a = allocate(hw.total, Request(), Request(1, None), ModelNeeds(name, False, False, 1), num_folds=2, num_trials=1)
        plans.append(plan_model(a, Estimate(2 * GiB), MemoryRequest(), MemoryRequest(), cap(ram_gb=5), None, NO_ADVICE))
    assert [p.folds_parallel for p in plans] == [2, 2]
    memory = MemoryPlan(None, cap(ram_gb=5))
    plan = build_plan(hw, plans, memory)
    assert [t.wave for t in plan.fit_tasks] == [0, 0, 1, 1]
    assert build_plan(hw, plans).num_waves == 1  # without the RAM, all four at once
    assert plan.to_json()["models"][0]["memory"]["reserved_ram_mb"] == 2048


def test_declared_ram_larger_than_this_machine_needs_dry_run():
    hw = box(2)
    with pytest.raises(HardwareError, match=r"hardware.memory_gb=100000 but this machine has"):
        capacity(HardwareConf(memory_gb=100_000), hw, Machine(2), None, dry_run=False)
    planned = capacity(HardwareConf(memory_gb=100_000), hw, Machine(2), None, dry_run=True)
    assert planned.ram == 100_000 * GiB


def test_undeclared_gpu_memory_is_nvml_total_of_the_smallest_device():
    hw = resolve(None, Machine(2, ("0", "1"), ("A", "B"), (16 * GiB, 12 * GiB)), dry_run=False)
    c = capacity(None, hw, Machine(2, ("0", "1"), ("A", "B"), (16 * GiB, 12 * GiB)), None, dry_run=False)
    assert c.gpu == 12 * GiB and c.ram is not None and c.ram > 0


# --------------------------------------------------------------------------- measured


def test_peak_memory_sees_a_transient_allocation_and_resets_between_blocks():
    import numpy as np

    with PeakMemory() as big:
        block = np.ones(400 * MiB // 8)
        del block
    with PeakMemory() as small:
        pass
    assert big.ram - small.ram > 300 * MiB


def test_the_devices_nvml_sees_a_process_on_are_recorded(monkeypatch):
    """NVML lists this process on device 1 of three: the peak is its memory there, and device 1 is recorded."""
    import os
    import sys
    from types import SimpleNamespace

    from pipeline.memory.measure import PeakMemory

    me, other = os.getpid(), os.getpid() + 1
    on = {0: [SimpleNamespace(pid=other, usedGpuMemory=9 << 20)], 1: [SimpleNamespace(pid=me, usedGpuMemory=5 << 20)],
          2: []}
    fake = SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 3,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetComputeRunningProcesses=lambda h: on[h],
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with PeakMemory(gpu=True) as peak:
        pass
    assert peak.gpu == 5 << 20 and peak.gpu_devices == {1}


def test_the_ram_read_from_proc_meminfo_is_psutils():
    """The planner reads the RAM from /proc/meminfo, the file psutil reads, without importing psutil."""
    import psutil

    from pipeline.memory.budget import system_ram

    total, available = system_ram()
    vm = psutil.virtual_memory()
    assert total == vm.total
    assert abs(available - vm.available) < 256 * 2**20  # what other processes did in between


# --------------------------------------------------------------------------- stacked levels


def _stacked_plan(compose, *overrides):
    from pipeline.run import make_plan
    from pipeline.settings import read_settings

    cfg = compose(["model=[lightgbm,xgboost]", "data=synthetic", "data.rows=400000", "parallelism.num_folds=3",
                   "tracking=none", "dry_run=true", *overrides])
    return make_plan(read_settings(cfg).plan_input(machine=Machine(2)))


@pytest.mark.parametrize(("classes", "columns"), [(7, 2 * 7), (2, 2 * 1), (0, 2 * 1)])
def test_a_fit_above_level_1_is_estimated_with_every_kinds_outputs_as_its_columns(compose, classes, columns):
    plan = _stacked_plan(compose, f"data.classes={classes}", "stack_levels=1")
    for a in plan.allocations:
        first, above = a.memory.estimate, a.memory.above
        # each kind's outputs (a probability per class above two, else one value) as float32 for every row:
        # the array the fit's request brings and the frame that joins it to the table's columns
        assert above.parts["stack_features"] == 2 * 400_000 * columns * 4
        assert "stack_features" not in first.parts
        assert above.parts["fold_copies"] > first.parts["fold_copies"]  # the rows it learns from are wider
        assert above.ram > first.ram + above.parts["stack_features"]
        assert a.memory.ram == above.ram - above.parts["table"]  # each fit reserves the widest
        assert plan.to_json()["models"][0]["memory"]["estimate_above_level_1"]["parts_mb"]["stack_features"] > 0


def test_without_stacking_there_is_one_estimate(compose):
    for a in _stacked_plan(compose, "data.classes=7").allocations:
        assert a.memory.above is None and a.memory.at(2) is a.memory.estimate


def test_the_memory_table_has_a_row_per_level_with_that_levels_estimate(compose):
    from pipeline.outputs import memory_rows

    plan = _stacked_plan(compose, "data.classes=7", "stack_levels=1")
    fit = {"model": "lightgbm", "cached": False, "peak_gpu_mb": 0.0}
    timeline = [{**fit, "level": 1, "peak_ram_mb": 300.0}, {**fit, "level": 1, "peak_ram_mb": 320.0},
                {**fit, "level": 2, "peak_ram_mb": 450.0}, {**fit, "level": 2, "peak_ram_mb": 400.0, "cached": True}]
    rows = {r["model"]: r for r in memory_rows(plan, timeline)}
    assert set(rows) == {"lightgbm", "lightgbm_l2", "xgboost"}  # xgboost_l2 ran no fit
    lightgbm = plan.allocation("lightgbm").memory
    assert (rows["lightgbm"]["fits"], rows["lightgbm"]["peak_ram_mb"]) == (2, 320.0)
    assert (rows["lightgbm_l2"]["fits"], rows["lightgbm_l2"]["peak_ram_mb"]) == (1, 450.0)
    assert rows["lightgbm"]["estimate_ram_mb"] == round(lightgbm.estimate.ram / MiB, 1)
    assert rows["lightgbm_l2"]["estimate_ram_mb"] == round(lightgbm.above.ram / MiB, 1)
    assert rows["xgboost"]["fits"] == 0
