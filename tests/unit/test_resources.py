"""The resource arithmetic: levels, derivation, errors, the devices grammar and GPU packing."""

from fractions import Fraction as F

import pytest

from pipeline.errors import ConfigError, ResourceError
from pipeline.config import HardwareConf
from pipeline.hardware import Machine, resolve
from pipeline.graph.plan import build_plan
from pipeline.quantities import gpu_amount
from pipeline.resources import DevicePool, ModelNeeds, Request, Resources, parse_devices, select_devices
from pipeline.planning.allocation import allocate

NN_AUTO = ModelNeeds("nn", wants_gpu=True, requires_gpu=False, max_gpus_per_fit=None, gpu_param="params.device=auto")
GBM_CPU = ModelNeeds("lightgbm", False, False, 1, "params.device_type=cpu", "LightGBM")
GBM_GPU = ModelNeeds("xgboost", True, True, 1, "params.device=cuda", "XGBoost")


def req(cpus=None, gpus=None, prefix="parallelism.fit"):
    return Request.parse(cpus, gpus, prefix)


def box(cpus, gpus):
    return resolve(HardwareConf(name="box", num_cpus=cpus, num_gpus=gpus), Machine(cpus, tuple(map(str, range(int(gpus) or 1)))[: int(gpus)]), dry_run=True)


class TestSeedExample:
    """AutoGluon's documented case: 32 CPU / 4 GPU, bag 10 / 2, fit 4 / 0.5, 2 folds, 2 trials."""

    def test_arithmetic(self):
        a = allocate(Resources(32, F(4)), req(10, 2, "parallelism.bag"), req(4, 0.5), NN_AUTO, num_folds=2,
                     num_trials=2, gpu_capacities=[F(1)] * 4)
        assert a.folds_parallel == 2
        assert a.trials_parallel == 2
        assert a.reservation == Resources(8, F(1))
        assert a.used == Resources(16, F(2))
        assert a.folds_parallel * a.trials_parallel == 4

    def test_plan_spreads_the_four_half_gpu_fits_over_the_four_idle_devices(self):
        hw = resolve(HardwareConf(name="4gpu", num_cpus=32, num_gpus=4, devices=4), Machine(2), dry_run=True)
        a = allocate(hw.total, req(10, 2, "parallelism.bag"), req(4, 0.5), NN_AUTO, num_folds=2, num_trials=2,
                     gpu_capacities=list(hw.capacities().values()))
        plan = build_plan(hw, [a])
        fits = plan.fit_tasks
        assert [t.wave for t in fits] == [0, 0, 0, 0]
        assert [t.device_ids for t in fits] == [(0,), (1,), (2,), (3,)]
        assert all(t.gpu_shares == (F(1, 2),) for t in fits)


class TestDerivation:
    def test_everything_unset_spreads_the_box_over_trials_and_folds(self):
        a = allocate(Resources(8, F(0)), req(prefix="parallelism.bag"), req(), GBM_CPU, num_folds=4, num_trials=1)
        assert a.fit == Resources(2, F(0))
        assert a.folds_parallel == 4

    def test_bag_set_fit_derived_from_bag(self):
        a = allocate(Resources(16, F(0)), req(8, None, "parallelism.bag"), req(), GBM_CPU, num_folds=4, num_trials=2)
        assert a.fit.num_cpus == 2
        assert (a.folds_parallel, a.trials_parallel) == (4, 2)

    def test_holdout_ignores_the_bag_level(self):
        a = allocate(Resources(4, F(0)), req(2, None, "parallelism.bag"), req(), GBM_CPU, num_folds=1, num_trials=1)
        assert a.fit.num_cpus == 4

    def test_gpu_model_gets_a_derived_share(self):
        a = allocate(Resources(8, F(1)), req(prefix="parallelism.bag"), req(), GBM_GPU, num_folds=2, num_trials=1,
                     gpu_capacities=[F(1)])
        assert a.fit.num_gpus == F(1, 2)
        assert a.folds_parallel == 2

    def test_derived_gpu_is_capped_at_one_device(self):
        a = allocate(Resources(8, F(4)), req(prefix="parallelism.bag"), req(), NN_AUTO, num_folds=1, num_trials=1,
                     gpu_capacities=[F(1)] * 4)
        assert a.fit.num_gpus == 1

    def test_cpu_model_gets_no_gpu(self):
        a = allocate(Resources(8, F(4)), req(prefix="parallelism.bag"), req(), GBM_CPU, num_folds=1, num_trials=1)
        assert a.fit.num_gpus == 0

    def test_sequential_runs_one_fit_with_the_whole_bag(self):
        a = allocate(Resources(8, F(0)), req(prefix="parallelism.bag"), req(), GBM_CPU, num_folds=5, num_trials=3,
                     sequential=True)
        assert a.fit.num_cpus == 8
        assert (a.folds_parallel, a.trials_parallel) == (1, 1)

    def test_model_resources_override_fit_per_field(self):
        model = Request.parse(None, 1, "model.xgboost.resources")
        merged = model.over(req(3, 0.5))
        assert (merged.num_cpus, merged.num_gpus) == (3, F(1))
        assert (merged.cpus_key, merged.gpus_key) == ("parallelism.fit.num_cpus", "model.xgboost.resources.num_gpus")


class TestErrors:
    def test_bag_above_total(self):
        with pytest.raises(ResourceError, match=r"parallelism.bag.num_cpus=40 exceeds hardware.num_cpus=32"):
            allocate(Resources(32, F(4)), req(40, None, "parallelism.bag"), req(), GBM_CPU, num_folds=2, num_trials=1)

    def test_fit_above_bag(self):
        with pytest.raises(ResourceError, match=r"parallelism.fit.num_gpus=3 exceeds parallelism.bag.num_gpus=2"):
            allocate(Resources(32, F(4)), req(None, 2, "parallelism.bag"), req(None, 3), NN_AUTO, num_folds=2,
                     num_trials=1)

    def test_fit_above_total_without_bagging(self):
        with pytest.raises(ResourceError, match=r"parallelism.fit.num_cpus=64 exceeds hardware.num_cpus=32"):
            allocate(Resources(32, F(0)), req(prefix="parallelism.bag"), req(64), GBM_CPU, num_folds=1, num_trials=1)

    def test_gpu_model_without_gpu(self):
        with pytest.raises(ResourceError, match=r"asks for a GPU \(params.device=cuda\).*hardware.num_gpus=0"):
            allocate(Resources(4, F(0)), req(prefix="parallelism.bag"), req(), GBM_GPU, num_folds=1, num_trials=1)

    def test_gpu_model_with_zero_gpu_fit(self):
        with pytest.raises(ResourceError, match=r"parallelism.fit.num_gpus=0"):
            allocate(Resources(4, F(2)), req(prefix="parallelism.bag"), req(None, 0), GBM_GPU, num_folds=1,
                     num_trials=1)

    def test_gbm_takes_at_most_one_gpu(self):
        with pytest.raises(ResourceError, match=r"a XGBoost fit uses at most 1 GPU"):
            allocate(Resources(4, F(4)), req(prefix="parallelism.bag"), req(None, 2), GBM_GPU, num_folds=1,
                     num_trials=1, gpu_capacities=[F(1)] * 4)

    def test_network_may_take_several_gpus(self):
        a = allocate(Resources(4, F(4)), req(prefix="parallelism.bag"), req(None, 2), NN_AUTO, num_folds=1,
                     num_trials=1, gpu_capacities=[F(1)] * 4)
        assert a.fit.num_gpus == 2

    def test_cpu_model_given_gpus_warns(self):
        warnings = []
        allocate(Resources(4, F(1)), req(prefix="parallelism.bag"), req(None, 0.5), GBM_CPU, num_folds=1,
                 num_trials=1, gpu_capacities=[F(1)], warn=warnings.append)
        assert len(warnings) == 1 and "configured for the CPU" in warnings[0]

    @pytest.mark.parametrize("value", [1.5, 2.25, 3.7])
    def test_gpu_fraction_above_one(self, value):
        with pytest.raises(ConfigError, match="above 1 a GPU count must be whole"):
            gpu_amount(value, "parallelism.fit.num_gpus")

    @pytest.mark.parametrize("value", [-1, -0.5])
    def test_negative_gpus(self, value):
        with pytest.raises(ConfigError, match="is negative"):
            gpu_amount(value, "parallelism.fit.num_gpus")

    @pytest.mark.parametrize("value", [0, -2])
    def test_cpus_below_one(self, value):
        with pytest.raises(ConfigError, match="must be at least 1 CPU"):
            Request.parse(value, None, "parallelism.fit")

    def test_fractional_cpus(self):
        with pytest.raises(ConfigError, match="not a whole number of CPUs"):
            Request.parse(1.5, None, "parallelism.fit")

    def test_negative_folds(self):
        with pytest.raises(ConfigError, match="parallelism.num_folds=-1"):
            allocate(Resources(4, F(0)), req(prefix="parallelism.bag"), req(), GBM_CPU, num_folds=-1, num_trials=1)

    def test_share_that_packs_nowhere(self):
        # 0.75 of a device on a box whose only device is half-owned: no slot can hold it
        with pytest.raises(ResourceError):
            allocate(Resources(4, F(1, 2)), req(prefix="parallelism.bag"), req(None, 0.5), NN_AUTO, num_folds=1,
                     num_trials=1, gpu_capacities=[F(1, 4)])


class TestDevicesGrammar:
    @pytest.mark.parametrize(
        "devices, expected",
        [
            (3, 3),
            ("3", 3),
            (-1, -1),
            ("-1", -1),
            ([1, 3], [1, 3]),
            ("1, 3", [1, 3]),
            ("2,", [2]),
            ("0", 0),
            (0, 0),
            (None, None),
        ],
    )
    def test_parse(self, devices, expected):
        assert parse_devices(devices) == expected

    def test_two_means_two_gpus_but_two_comma_means_index_two(self):
        assert select_devices("2", F(2), 4) == [0, 1]
        assert select_devices("2,", F(1), 4) == [2]

    def test_minus_one_means_all(self):
        assert select_devices(-1, F(4), 4) == [0, 1, 2, 3]

    @pytest.mark.parametrize("devices", [[1, 1], "0, 0", [2, 3, 2]])
    def test_duplicates(self, devices):
        with pytest.raises(ConfigError, match="must be unique"):
            parse_devices(devices)

    def test_out_of_range(self):
        with pytest.raises(ConfigError, match="device 7 is out of range"):
            select_devices([0, 7], F(2), 4)

    def test_disagrees_with_num_gpus(self):
        with pytest.raises(ConfigError, match=r"selects 1 GPU\(s\) \[2\] but hardware.num_gpus=4.*'2,' means GPU index 2"):
            select_devices("2,", F(4), 4)

    @pytest.mark.parametrize("devices", [True, [True, 1], [0.5], "a,b", "x", -3])
    def test_bad_types(self, devices):
        with pytest.raises(ConfigError):
            parse_devices(devices)

    def test_fraction_of_one_device(self):
        assert select_devices([2], F(1, 2), 4) == [2]


class TestPacking:
    def test_shares_go_to_idle_devices_first(self):
        """AutoGluon's plan_gpu_assignments example [0.5, 1, 0.25, 0.5] on 4 GPUs: a device each, none shared."""
        pool = DevicePool(16, {d: F(1) for d in range(4)})
        placed = [pool.try_allocate(Resources(1, F(g).limit_denominator())) for g in (0.5, 1, 0.25, 0.5)]
        assert [p[0][0] for p in placed] == [0, 1, 2, 3]

    def test_a_device_is_shared_only_when_fits_outnumber_devices(self):
        pool = DevicePool(32, {d: F(1) for d in range(4)})
        placed = [pool.try_allocate(Resources(6, F(1, 2))) for _ in range(5)]
        assert [p[0][0] for p in placed] == [0, 1, 2, 3, 0]

    def test_the_share_goes_where_most_room_is_left(self):
        pool = DevicePool(8, {0: F(1), 1: F(1)})
        pool.try_allocate(Resources(1, F(3, 4)))  # device 0
        pool.try_allocate(Resources(1, F(1, 2)))  # device 1
        assert pool.try_allocate(Resources(1, F(1, 4)))[0][0] == 1  # 1/2 left there, 1/4 on device 0

    def test_bag5_of_half_gpu_fits_on_four_gpus_is_placed_0_1_2_3_0(self):
        """+hardware=4gpu hardware.num_cpus=32 parallelism=bag5 with GBMs on the GPU: five 0.5-GPU fits."""
        hw = resolve(HardwareConf(name="4gpu", num_cpus=32, num_gpus=4, devices=4), Machine(2), dry_run=True)
        a = allocate(hw.total, req(prefix="parallelism.bag"), req(), GBM_GPU, num_folds=5, num_trials=1,
                     gpu_capacities=list(hw.capacities().values()))
        assert a.fit == Resources(1, F(1, 2))  # a GPU fit holds its host threads only
        fits = build_plan(hw, [a]).fit_tasks
        assert [t.wave for t in fits] == [0] * 5
        assert [t.device_ids[0] for t in fits] == [0, 1, 2, 3, 0]

    def test_whole_gpus_take_free_devices(self):
        pool = DevicePool(8, {d: F(1) for d in range(4)})
        pool.try_allocate(Resources(1, F(1, 2)))
        got = pool.try_allocate(Resources(1, F(2)))
        assert [d for d, _ in got] == [1, 2]
        assert pool.try_allocate(Resources(1, F(2))) is None

    def test_quarters_fill_exactly(self):
        pool = DevicePool(8, {0: F(1)})
        for _ in range(4):
            assert pool.try_allocate(Resources(1, F(1, 4))) is not None
        assert pool.try_allocate(Resources(1, F(1, 4))) is None
        assert pool.free[0] == 0

    def test_release_restores(self):
        pool = DevicePool(2, {0: F(1)})
        shares = pool.try_allocate(Resources(2, F(1, 2)))
        assert pool.try_allocate(Resources(1, F(0))) is None  # no CPU left
        pool.release(Resources(2, F(1, 2)), shares)
        assert pool.idle


class TestFoldsThatPay:
    """With the fit's CPUs left unset, the planner runs as many folds at once as its estimate says pays."""

    def test_lightgbm_and_xgboost_bag5_on_sixteen_cpus_run_one_at_a_time_and_the_network_five_at_once(self):
        """The models' own serial shares: on the 16-core H100 box LightGBM's bag5 on Adult ran 1.10x slower with
        five folds at once than one at a time; the network's folds gain little from threads."""
        from pipeline.models import LightGBMModel, TorchMLPModel, XGBoostModel

        for needs, at_once in ((LightGBMModel.needs("lightgbm", {}), 1), (XGBoostModel.needs("xgboost", {}), 1),
                               (TorchMLPModel.needs("nn", {"device": "cpu"}), 5)):
            a = allocate(Resources(16, F(0)), req(prefix="parallelism.bag"), req(), needs, num_folds=5, num_trials=1)
            assert a.folds_parallel == at_once, needs.name

    def test_five_folds_on_two_cpus_run_one_at_a_time_with_every_thread(self):
        a = allocate(Resources(2, F(0)), req(prefix="parallelism.bag"), req(), GBM_CPU, num_folds=5, num_trials=1)
        assert (a.folds_parallel, a.fit) == (1, Resources(2, F(0)))
        assert "one at a time with 2 threads" in a.parallel_reason

    def test_five_folds_on_sixteen_cpus_run_together(self):
        a = allocate(Resources(16, F(0)), req(prefix="parallelism.bag"), req(), GBM_CPU, num_folds=5, num_trials=1)
        assert (a.folds_parallel, a.fit) == (5, Resources(3, F(0)))
        assert "5 at once with 3 thread(s)" in a.parallel_reason

    def test_a_set_fit_keeps_the_hierarchy_formula(self):
        a = allocate(Resources(2, F(0)), req(prefix="parallelism.bag"), req(1), GBM_CPU, num_folds=5, num_trials=1)
        assert a.folds_parallel == 2 and a.parallel_reason == ""

    def test_a_network_runs_two_folds_at_once_where_a_gbm_runs_one(self):
        """A model's own serial share decides: on 2 CPUs the network's 5 folds run two at once with a
        thread each (its second thread gains little), a GBM's one at a time with both."""
        from pipeline.models.lightgbm import LightGBMModel
        from pipeline.models.nn import TorchMLPModel

        nn = TorchMLPModel.needs("nn", {"device": "cpu"})
        gbm = LightGBMModel.needs("lightgbm", {})
        a = allocate(Resources(2, F(0)), req(prefix="parallelism.bag"), req(), nn, num_folds=5, num_trials=1)
        assert (a.folds_parallel, a.fit) == (2, Resources(1, F(0)))
        assert "2 at once with 1 thread(s)" in a.parallel_reason
        b = allocate(Resources(2, F(0)), req(prefix="parallelism.bag"), req(), gbm, num_folds=5, num_trials=1)
        assert (b.folds_parallel, b.fit) == (1, Resources(2, F(0)))

    def test_the_estimate_never_picks_a_slower_choice(self):
        from pipeline.planning.payoff import estimate, folds_at_once

        for serial in (0.1, 0.3, 0.75):
            for k in range(2, 11):
                for cpus in range(2, 17):
                    choice = folds_at_once(k, cpus, serial)
                    times = [estimate(k, cpus, p, serial) for p in range(1, min(k, cpus) + 1)]
                    assert estimate(k, cpus, choice.folds_parallel, serial) <= min(times) + 1e-9
                    assert choice.folds_parallel * choice.fit_cpus <= cpus


class TestFoldsBesideOtherModels:
    """Beside a model whose folds already run at once on the CPUs (the network's), a GBM's folds pay no
    worker start and a partial wave's idle CPU goes to the other model's fits."""

    def test_alongside_the_estimate_counts_no_start_and_a_partial_wave_as_a_fraction(self):
        from pipeline.planning.payoff import WORKER_START, estimate, fit_time

        assert estimate(5, 2, 2, 0.11) == pytest.approx(3 * fit_time(1, 0.11) + WORKER_START)
        assert estimate(5, 2, 2, 0.11, alongside=True) == pytest.approx(2.5 * fit_time(1, 0.11))
        assert estimate(5, 2, 1, 0.11, alongside=True) == estimate(5, 2, 1, 0.11)  # one at a time: unchanged

    def test_a_gbm_alone_runs_its_folds_one_at_a_time_and_beside_the_network_two_at_once(self):
        from pipeline.models import LightGBMModel

        gbm = LightGBMModel.needs("lightgbm", {})
        alone = allocate(Resources(2, F(0)), req(prefix="parallelism.bag"), req(), gbm, num_folds=5, num_trials=1)
        beside = allocate(Resources(2, F(0)), req(prefix="parallelism.bag"), req(), gbm, num_folds=5, num_trials=1,
                          alongside=True)
        assert (alone.folds_parallel, alone.fit) == (1, Resources(2, F(0)))
        assert (beside.folds_parallel, beside.fit) == (2, Resources(1, F(0)))
        assert "beside the other models' parallel folds" in beside.parallel_reason

    @pytest.mark.parametrize("models, threads", [
        ("lightgbm", {"lightgbm": 2}),  # alone: every thread, one fold at a time, in the driver
        ("[lightgbm,xgboost]", {"lightgbm": 2, "xgboost": 2}),  # neither runs folds at once
        ("all", {"lightgbm": 1, "xgboost": 1, "nn": 1}),  # beside the network's two folds at once
    ])
    def test_the_plan_decides_each_models_threads_from_the_whole_run(self, compose, models, threads):
        from pipeline.run import make_plan
        from pipeline.settings import read_settings

        cfg = compose([f"model={models}", "parallelism=bag5", "tracking=none", "dry_run=true"])
        plan = make_plan(read_settings(cfg).plan_input(machine=Machine(2)))
        assert {a.model: a.fit.num_cpus for a in plan.allocations} == threads
