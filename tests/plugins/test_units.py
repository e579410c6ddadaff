"""The two Hydra plugins without the CLI: discovery, slot planning, option checks, the search loop."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction
from types import SimpleNamespace

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from pipeline.errors import ConfigError
from pipeline.hardware import SIMULATE_ENV, SLOT_CPUS_ENV, SLOT_GPUS_ENV, Machine


def test_hydra_discovers_both_plugins():
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher
    from hydra.plugins.sweeper import Sweeper

    def names(kind):  # Hydra's scan re-executes plugin modules, so compare names, not class objects
        return {f"{c.__module__}.{c.__name__}" for c in Plugins.instance().discover(kind)}

    assert "hydra_plugins.pipeline_gpu_launcher.gpu_launcher.GpuLauncher" in names(Launcher)
    assert "hydra_plugins.pipeline_optuna_sweeper.optuna_sweeper.OptunaSweeper" in names(Sweeper)


def test_config_groups_are_registered(compose):
    cfg = compose(["hydra/launcher=gpu", "hydra/sweeper=optuna", "hydra/sweeper/sampler=random"],
                  return_hydra_config=True)
    assert cfg.hydra.launcher.gpus_per_job == 1.0 and cfg.hydra.launcher.n_jobs is None
    assert cfg.hydra.sweeper.sampler.name == "random" and cfg.hydra.sweeper.direction is None
    key = "hydra.sweeper.params.model.lightgbm.params.num_leaves"
    nested = compose(["hydra/sweeper=optuna", f"{key}='range(8,64)'"], return_hydra_config=True)
    assert nested.hydra.sweeper.params.model.lightgbm.params.num_leaves == "range(8,64)"
    two = compose(["hydra/sweeper=optuna", "hydra.sweeper.direction=[maximize,minimize]",
                   "objectives=[val_score,predict_seconds]"], return_hydra_config=True)
    assert list(two.hydra.sweeper.direction) == ["maximize", "minimize"]
    assert list(two.objectives) == ["val_score", "predict_seconds"]


def test_discovery_imports_nothing_heavy():
    import subprocess
    import sys

    code = (
        "import sys; from hydra.core.plugins import Plugins; from hydra.plugins.launcher import Launcher;"
        "Plugins.instance().discover(Launcher);"
        "heavy = [m for m in ('torch', 'mlflow', 'optuna', 'cloudpickle', 'lightgbm', 'xgboost', 'pipeline',"
        " 'hydra_plugins.pipeline_gpu_launcher._core', 'hydra_plugins.pipeline_gpu_launcher._slots',"
        " 'hydra_plugins.pipeline_gpu_launcher._job', 'hydra_plugins.pipeline_optuna_sweeper._impl')"
        " if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --------------------------------------------------------------------------- launcher slots


@pytest.fixture
def simulated(monkeypatch):
    """detect() on a box with N simulated GPUs, every device visible, and `cpus` CPUs (a GPU box has many)."""

    def _machine(n: int, cpus: int = 32) -> Machine:
        from dataclasses import replace

        from pipeline.hardware import detect

        monkeypatch.setenv(SIMULATE_ENV, str(n))
        for var in ("CUDA_VISIBLE_DEVICES", SLOT_CPUS_ENV, SLOT_GPUS_ENV):
            monkeypatch.delenv(var, raising=False)
        return replace(detect(), num_cpus=cpus)

    return _machine


def slots_for(num_jobs, machine, gpus_per_job=1.0, cpus_per_job=None, n_jobs=None, devices=None):
    from hydra_plugins.pipeline_gpu_launcher._slots import plan_slots
    from hydra_plugins.pipeline_gpu_launcher.config import GpuLauncherConf

    conf = GpuLauncherConf(gpus_per_job=gpus_per_job, cpus_per_job=cpus_per_job, n_jobs=n_jobs, devices=devices)
    return plan_slots(conf, machine, num_jobs)


def test_eight_half_gpu_jobs_use_each_of_four_devices_twice(simulated):
    slots, notes = slots_for(8, simulated(4), gpus_per_job=0.5)
    assert len(slots) == 8
    assert [s.device_ids for s in slots] == [(0,), (1,), (2,), (3,), (0,), (1,), (2,), (3,)]
    assert Counter(s.env()["CUDA_VISIBLE_DEVICES"] for s in slots) == {"0": 2, "1": 2, "2": 2, "3": 2}
    assert all(s.env()[SLOT_GPUS_ENV] == "0.5" and s.num_gpus == Fraction(1, 2) for s in slots)


def test_jobs_at_once_are_capped_by_the_cpus(simulated):
    """Eight half-GPU slots but two CPUs: two jobs at once, one CPU each, never shared CPUs."""
    slots, notes = slots_for(8, simulated(4, cpus=2), gpus_per_job=0.5)
    assert len(slots) == 2 and all(s.num_cpus == 1 for s in slots)
    assert not any("share them" in n for n in notes)


def test_two_jobs_of_two_gpus_get_disjoint_pairs(simulated):
    slots, _ = slots_for(2, simulated(4), gpus_per_job=2)
    assert [s.device_ids for s in slots] == [(0, 1), (2, 3)]
    assert [s.env()["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0,1", "2,3"]
    assert all(s.env()[SLOT_GPUS_ENV] == "2" for s in slots)


def test_more_jobs_than_slots_get_as_many_slots_as_fit(simulated):
    slots, _ = slots_for(5, simulated(2), gpus_per_job=1)
    assert [s.device_ids for s in slots] == [(0,), (1,)]


def test_cpus_are_divided_among_the_jobs_that_run_at_once():
    machine = Machine(16, ("0", "1", "2", "3"), ("simulated",) * 4, (0,) * 4, simulated=True)
    slots, notes = slots_for(8, machine, gpus_per_job=0.5)
    assert {s.num_cpus for s in slots} == {2} and not notes
    slots, _ = slots_for(3, machine, gpus_per_job=0.5)
    assert [s.device_ids for s in slots] == [(0,), (1,), (2,)] and {s.num_cpus for s in slots} == {5}
    slots, _ = slots_for(8, machine, gpus_per_job=0.5, n_jobs=2)
    assert [s.device_ids for s in slots] == [(0,), (1,)] and {s.num_cpus for s in slots} == {8}


def test_chosen_devices_keep_their_physical_ids(simulated):
    slots, _ = slots_for(4, simulated(4), gpus_per_job=0.5, devices=[2, 3])
    assert [s.env()["CUDA_VISIBLE_DEVICES"] for s in slots] == ["2", "3", "2", "3"]


def test_a_visible_device_subset_maps_to_its_tokens(simulated, monkeypatch):
    simulated(4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    from pipeline.hardware import detect

    slots, _ = slots_for(2, detect(), gpus_per_job=1)
    assert [s.env()["CUDA_VISIBLE_DEVICES"] for s in slots] == ["1", "3"]


def test_cpu_slots_hide_every_gpu(simulated):
    slots, notes = slots_for(8, simulated(2), gpus_per_job=0, cpus_per_job=1, n_jobs=8)
    assert len(slots) == 8 and not any(s.tokens for s in slots)
    env = slots[0].env()
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env[SLOT_GPUS_ENV] is None and env[SLOT_CPUS_ENV] == "1"
    machine_cpus = simulated(2).num_cpus
    assert (len(notes) == 1 and "share them" in notes[0]) == (8 > machine_cpus)


def test_a_machine_without_gpus_runs_cpu_slots_and_says_so():
    slots, notes = slots_for(2, Machine(4), gpus_per_job=1)
    assert [s.env()["CUDA_VISIBLE_DEVICES"] for s in slots] == ["", ""] and {s.num_cpus for s in slots} == {2}
    assert "no CUDA device is visible" in notes[0] and "gpus_per_job=1" in notes[0]


@pytest.mark.parametrize(
    "options, machine_gpus, expected",
    [
        ({"gpus_per_job": 1.5}, 4, "hydra.launcher.gpus_per_job=1.5"),
        ({"gpus_per_job": -1}, 4, "hydra.launcher.gpus_per_job=-1 is negative"),
        ({"gpus_per_job": 3}, 2, "hydra.launcher.gpus_per_job=3 but the jobs may use 2 device(s)"),
        ({"cpus_per_job": 0}, 2, "hydra.launcher.cpus_per_job=0 must be at least 1"),
        ({"cpus_per_job": 10_000}, 2, "hydra.launcher.cpus_per_job=10000 but this machine has"),
        ({"n_jobs": 0}, 2, "hydra.launcher.n_jobs=0"),
        ({"devices": [0, 5]}, 2, "hydra.launcher.devices=[0, 5]: device 5 is out of range"),
        ({"devices": [1, 1]}, 2, "device ids must be unique"),
        ({"devices": []}, 2, "hydra.launcher.devices=[]"),
        ({"devices": [0], "gpus_per_job": 0}, 2, "gpus_per_job=0 gives jobs no GPU"),
    ],
)
def test_bad_launcher_options_are_config_errors(simulated, options, machine_gpus, expected):
    from hydra.errors import CompactHydraException

    with pytest.raises(ConfigError) as info:
        slots_for(2, simulated(machine_gpus), **options)
    assert expected in str(info.value)
    assert isinstance(info.value, CompactHydraException)  # Hydra prints it without a traceback


def test_a_failed_job_return_raises_its_error():
    from hydra_plugins.pipeline_gpu_launcher._job import JobFailedError, failed_return

    ret = failed_return(["seed=1"], JobFailedError("job #1 (seed=1) died (killed by signal SIGKILL)"))
    assert ret.status == JobStatus.FAILED and ret.overrides == ["seed=1"]
    with pytest.raises(JobFailedError, match="SIGKILL"):
        _ = ret.return_value


class TwoArgumentError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def test_a_job_result_that_cannot_cross_processes_becomes_a_readable_failure():
    import pickle
    import threading

    from hydra_plugins.pipeline_gpu_launcher._job import JobFailedError, _dump_return, failed_return

    unpicklable_error = failed_return(["seed=1"], TwoArgumentError(7, "the disk is full"))
    ret = pickle.loads(_dump_return(unpicklable_error, 1, "seed=1"))
    assert ret.status == JobStatus.FAILED
    with pytest.raises(JobFailedError, match=r"job #1 \(seed=1\) failed: TwoArgumentError: the disk is full"):
        _ = ret.return_value

    odd = JobReturn(overrides=["seed=2"], status=JobStatus.COMPLETED, _return_value=threading.Lock())
    ret = pickle.loads(_dump_return(odd, 2, "seed=2"))
    with pytest.raises(JobFailedError, match="returned a lock, which cannot be sent back"):
        _ = ret.return_value

    fine = JobReturn(overrides=["seed=3"], status=JobStatus.COMPLETED, _return_value=0.87)
    assert pickle.loads(_dump_return(fine, 3, "seed=3")).return_value == 0.87


# ------------------------------------------------------------------------ sweeper: options and search space


def settings(**overrides):
    """The sweeper's options as Hydra hands them to OptunaSweeper, read through its schema as setup() reads them."""
    from hydra_plugins.pipeline_optuna_sweeper.config import OptunaSweeperConf

    options = dict(sampler={"name": "tpe", "seed": 0, "n_startup_trials": 10, "multivariate": False},
                   direction="maximize", n_trials=4, n_jobs=2, storage=None, study_name=None,
                   max_failure_rate=0.0, params={})
    options.update(overrides)
    return OptunaSweeperConf(**options)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"direction": None}, "hydra.sweeper.direction is not set: give maximize or minimize"),
        ({"direction": "up"}, "hydra.sweeper.direction='up': give maximize or minimize, or a list of them"),
        ({"direction": ["maximize", "up"]}, "hydra.sweeper.direction=['maximize', 'up']: give maximize or"),
        ({"direction": []}, "hydra.sweeper.direction=[]: give maximize or minimize"),
        ({"schedule": "eager"}, "hydra.sweeper.schedule='eager': valid values are async"),
        ({"sampler": {"name": "cmaes"}},
         "hydra.sweeper.sampler.name='cmaes': valid samplers are tpe, random, grid"),
        ({"sampler": {"name": "tpe", "seed": 1.5}}, "hydra.sweeper.sampler.seed=1.5"),
        ({"n_trials": 0}, "hydra.sweeper.n_trials=0: give an integer >= 1"),
        ({"n_jobs": -2}, "hydra.sweeper.n_jobs=-2"),
        ({"max_failure_rate": 1.5}, "hydra.sweeper.max_failure_rate=1.5: give a fraction from 0.0"),
        ({"params": {"x": [1, 2]}}, "hydra.sweeper.params.x=[1, 2]: give the search space as one override"),
    ],
)
def test_bad_sweeper_options_are_config_errors(overrides, expected):
    with pytest.raises(ConfigError) as info:
        settings(**overrides)
    assert expected in str(info.value)


def space(params=None, arguments=()):
    from hydra_plugins.pipeline_optuna_sweeper._impl import _flatten, build_search_space

    return build_search_space(_flatten(params or {}), list(arguments), OverridesParser.create())


def test_override_grammar_becomes_optuna_distributions():
    import optuna.distributions as d

    s = space({
        "lr": "tag(log, interval(0.01, 0.3))",
        "model": {"leaves": "int(interval(8, 64))"},
        "depth": "range(2, 8, 2)",
        "booster": "choice(gbdt, dart)",
        "act": "relu,gelu",
        "frac": "interval(0.5, 1.0)",
        "seed": 3,
    })
    dists = s.distributions
    assert dists["lr"] == d.FloatDistribution(0.01, 0.3, log=True)
    assert dists["model.leaves"] == d.IntDistribution(8, 64)
    assert dists["depth"] == d.CategoricalDistribution([2, 4, 6])  # range's stop is excluded
    assert dists["booster"] == d.CategoricalDistribution(["gbdt", "dart"])
    assert dists["act"] == d.CategoricalDistribution(["relu", "gelu"])
    assert dists["frac"] == d.FloatDistribution(0.5, 1.0)
    assert list(s.fixed.values()) == ["seed=3"]
    sampled = {"lr": 0.1, "model.leaves": 9, "depth": 4, "booster": "dart", "act": "gelu", "frac": 0.75}
    line = s.overrides(sampled)
    assert line == ["seed=3", "lr=0.1", "model.leaves=9", "depth=4", "booster=dart", "act=gelu", "frac=0.75"]


def test_the_command_line_wins_over_params_and_passes_plain_overrides():
    import optuna.distributions as d

    s = space({"lr": "interval(0.01, 0.3)", "leaves": "range(8, 10)"},
              ["model=lightgbm", "lr=0.05", "leaves=int(interval(8, 64))", "+extra=1"])
    assert s.fixed == {"model": "model=lightgbm", "lr": "lr=0.05", "extra": "+extra=1"}
    assert s.distributions == {"leaves": d.IntDistribution(8, 64)}


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"lr": "interval(0.3, 0.01)"}, "hydra.sweeper.params.lr: 'lr=interval(0.3, 0.01)' is empty"),
        ({"lr": "tag(log, interval(0, 1))"}, "is on a log scale, so its start must be > 0"),
        ({"lr": "tag(cube, interval(1, 2))"}, "the only tag understood is log"),
        ({"lr": "interval(0.01,"}, "hydra.sweeper.params.lr='interval(0.01,' is not a valid search space"),
        ({"lr": "choice(1, 1)"}, "lists a value more than once"),
    ],
)
def test_bad_search_spaces_are_config_errors(params, expected):
    with pytest.raises(ConfigError) as info:
        space(params)
    assert expected in str(info.value)


def test_grid_needs_discrete_values():
    from hydra_plugins.pipeline_optuna_sweeper._impl import make_sampler

    with pytest.raises(ConfigError, match="lr is a continuous interval; give it as choice"):
        make_sampler(settings(sampler={"name": "grid", "seed": 0}), space({"lr": "interval(0.01, 0.3)"}))


# ------------------------------------------------------------------------ sweeper: the ask/launch/tell loop


class FakeLauncher:
    """Scores each job with `score(params)`; a score that is an exception fails the job."""

    def __init__(self, score):
        self.score = score
        self.batches = []

    def launch(self, job_overrides, initial_job_idx):
        self.batches.append((initial_job_idx, [list(o) for o in job_overrides]))
        out = []
        for overrides in job_overrides:
            params = dict(o.split("=", 1) for o in overrides)
            value = self.score(params)
            ret = JobReturn(overrides=list(overrides))
            ret.status = JobStatus.FAILED if isinstance(value, Exception) else JobStatus.COMPLETED
            ret.return_value = value
            out.append(ret)
        return out


def run_sweep(tmp_path, score, arguments, **options):
    from hydra_plugins.pipeline_optuna_sweeper._impl import sweep

    sweeper = SimpleNamespace(
        settings=settings(**options), launcher=FakeLauncher(score),
        config=OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}}),
        hydra_context=SimpleNamespace(config_loader=None), validate_batch_is_legal=lambda batch: None,
    )
    sweep(sweeper, arguments)
    return sweeper.launcher


def test_the_sweep_asks_in_batches_and_writes_the_best(tmp_path):
    launcher = run_sweep(
        tmp_path, lambda p: -(float(p["x"]) - 0.3) ** 2, ["fixed=1", "x=interval(0, 1)"],
        n_trials=5, n_jobs=2, direction="maximize",
    )
    assert [(start, len(batch)) for start, batch in launcher.batches] == [(0, 2), (2, 2), (4, 1)]
    jobs = [overrides for _, batch in launcher.batches for overrides in batch]
    assert all(o[0] == "fixed=1" and 0 <= float(o[1].split("=")[1]) <= 1 for o in jobs)
    results = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    scores = [-(float(o[1].split("=")[1]) - 0.3) ** 2 for o in jobs]
    assert math.isclose(results["best_value"], max(scores))
    assert results["best_overrides"] == jobs[scores.index(max(scores))]
    assert results["best_params"]["x"] == float(jobs[scores.index(max(scores))][1].split("=")[1])
    assert results["n_trials"] == 5 and results["n_failed"] == 0


def test_failed_trials_stop_the_sweep_beyond_the_failure_rate(tmp_path):
    from hydra_plugins.pipeline_optuna_sweeper._impl import SweepFailedError

    def score(p):
        return RuntimeError("boom") if p["x"] == "b" else 1.0

    expected = r"(?s)1 of 2 trial\(s\) failed.*max_failure_rate=0.*RuntimeError: boom"
    with pytest.raises(SweepFailedError, match=expected):
        run_sweep(tmp_path, score, ["x=a,b"], sampler={"name": "grid", "seed": 0}, n_trials=2, n_jobs=2)


def test_failed_trials_within_the_rate_are_told_as_failures(tmp_path):
    def score(p):
        return None if p["x"] == "b" else {"a": 1.0, "c": 3.0}[p["x"]]

    run_sweep(tmp_path, score, ["x=a,b,c"], sampler={"name": "grid", "seed": 0}, n_trials=3, n_jobs=3,
              max_failure_rate=0.5, direction="minimize")
    results = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert results["best_params"] == {"x": "a"} and results["best_value"] == 1.0 and results["n_failed"] == 1


def test_a_grid_smaller_than_n_trials_runs_each_combination_once(tmp_path):
    launcher = run_sweep(tmp_path, lambda p: float(p["x"]), ["x=range(3)"],
                         sampler={"name": "grid", "seed": 0}, n_trials=10, n_jobs=2)
    jobs = sorted(o[0] for _, batch in launcher.batches for o in batch)
    assert jobs == ["x=0", "x=1", "x=2"]


def test_a_sweep_without_a_search_space_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="nothing to search"):
        run_sweep(tmp_path, lambda p: 1.0, ["seed=1"])


def test_a_stored_study_resumes_without_repeating_its_points(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    options = dict(sampler={"name": "random", "seed": 3}, storage=storage, study_name="s",
                   n_trials=2, n_jobs=2)
    first = run_sweep(tmp_path, lambda p: float(p["x"]), ["x=interval(0, 1)"], **options)
    second = run_sweep(tmp_path, lambda p: float(p["x"]), ["x=interval(0, 1)"], **options)
    points = [o[0] for launcher in (first, second) for _, batch in launcher.batches for o in batch]
    assert len(set(points)) == 4
    results = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert results["best_value"] == max(float(p.split("=")[1]) for p in points)  # over both sessions
    with pytest.raises(ConfigError, match="hydra.sweeper.direction=minimize but the stored study 's'"):
        run_sweep(tmp_path, lambda p: 1.0, ["x=interval(0, 1)"], **options, direction="minimize")


class StreamingLauncher(FakeLauncher):
    """Runs jobs on `max_jobs` slots in virtual time: a job lasts `duration(params)`; a slot takes the next
    job the moment its job ends. Records (time, event, job) so tests can see when trials were asked."""

    def __init__(self, score, duration):
        super().__init__(score)
        self.duration = duration
        self.events = []

    def launch_stream(self, next_job, on_return, *, max_jobs):
        import heapq

        clock, running, exhausted = 0.0, [], False
        while True:
            while not exhausted and len(running) < max_jobs:
                item = next_job()
                if item is None:
                    exhausted = True
                    break
                idx, overrides = item
                params = dict(o.split("=", 1) for o in overrides)
                self.events.append((clock, "start", idx))
                heapq.heappush(running, (clock + self.duration(params), idx, list(overrides)))
            if not running:
                return
            clock, idx, overrides = heapq.heappop(running)
            (ret,) = self.launch([overrides], idx)
            self.events.append((clock, "end", idx))
            on_return(idx, ret)


def run_streamed(tmp_path, score, duration, arguments, **options):
    from hydra_plugins.pipeline_optuna_sweeper._impl import sweep

    sweeper = SimpleNamespace(
        settings=settings(**options), launcher=StreamingLauncher(score, duration),
        config=OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}}),
        hydra_context=SimpleNamespace(config_loader=None), validate_batch_is_legal=lambda batch: None,
    )
    sweep(sweeper, arguments)
    return sweeper.launcher


def test_a_trial_starts_as_soon_as_a_slot_frees(tmp_path):
    # job time grows with x: with 2 slots a short job's slot takes the next trial while a long one runs
    launcher = run_streamed(tmp_path, lambda p: float(p["x"]), lambda p: float(p["x"]), ["x=int(interval(1, 50))"],
                            n_trials=8, n_jobs=2, sampler={"name": "random", "seed": 1})
    running, most = set(), 0
    for _, event, idx in launcher.events:
        running.add(idx) if event == "start" else running.discard(idx)
        most = max(most, len(running))
    assert most == 2
    ends = {idx: t for t, e, idx in launcher.events if e == "end"}
    starts = {idx: t for t, e, idx in launcher.events if e == "start"}
    # every job after the first two starts exactly when an earlier one ended, not at a batch boundary
    assert all(starts[idx] in ends.values() for idx in range(2, 8))
    assert any(starts[idx] < max(ends[0], ends[1]) for idx in range(2, 8)), launcher.events
    assert sorted(ends) == list(range(8))


def test_streamed_trials_stop_starting_past_the_failure_rate_but_finish_the_running_ones(tmp_path):
    from hydra_plugins.pipeline_optuna_sweeper._impl import SweepFailedError

    calls = []

    def score(p):
        calls.append(p["x"])
        return RuntimeError("boom") if len(calls) == 1 else 1.0

    with pytest.raises(SweepFailedError, match=r"1 of 2 trial\(s\) failed"):
        run_streamed(tmp_path, score, lambda p: 1.0 if not calls else 5.0, ["x=interval(0, 1)"],
                     n_trials=6, n_jobs=2, sampler={"name": "random", "seed": 0})
    assert len(calls) == 2  # the second, running when the first failed, was told; no third started


def dominated(a, b, signs):
    """b dominates a: no worse in every objective, better in one (signs: +1 maximise, -1 minimise)."""
    better_eq = all(s * y >= s * x for x, y, s in zip(a, b, signs))
    return better_eq and any(s * y > s * x for x, y, s in zip(a, b, signs))


def test_two_objectives_write_the_pareto_front(tmp_path):
    def score(p):
        x = float(p["x"])
        return [x, (x - 0.5) ** 2 + float(p["y"])]  # maximise x, minimise the cost

    launcher = run_streamed(tmp_path, score, lambda p: 1.0, ["x=interval(0, 1)", "y=choice(0.0, 0.3)"],
                            n_trials=12, n_jobs=3, direction=["maximize", "minimize"],
                            sampler={"name": "random", "seed": 2})
    results = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert results["direction"] == ["maximize", "minimize"] and results["n_trials"] == 12
    jobs = {}
    for _, batch in launcher.batches:
        (overrides,) = batch
        params = dict(o.split("=", 1) for o in overrides)
        jobs[len(jobs)] = score(params)
    front = {j for j, v in jobs.items() if not any(dominated(v, w, (1, -1)) for w in jobs.values())}
    assert {s["job"] for s in results["solutions"]} == front
    for s in results["solutions"]:
        assert s["values"] == pytest.approx(jobs[s["job"]])
        assert s["overrides"] == [f"x={s['params']['x']}", f"y={s['params']['y']}"]
    assert "best_value" not in results


def test_a_job_returning_the_wrong_number_of_values_is_a_failed_trial():
    from hydra_plugins.pipeline_optuna_sweeper._impl import score

    ret = JobReturn(overrides=[], status=JobStatus.COMPLETED, _return_value=0.9)
    assert score(ret, 1) == ([0.9], None)
    values, problem = score(ret, 2)
    assert values is None and "returned 1 value(s) (0.9) but hydra.sweeper.direction names 2" in problem
    pair = JobReturn(overrides=[], status=JobStatus.COMPLETED, _return_value=[0.9, float("nan")])
    assert "nan is not a finite score" in score(pair, 2)[1]


def test_directions_and_objectives_of_different_lengths_are_refused_before_any_job(tmp_path):
    from hydra_plugins.pipeline_optuna_sweeper._impl import sweep

    sweeper = SimpleNamespace(
        settings=settings(direction=["maximize", "minimize"]), launcher=FakeLauncher(lambda p: 1.0),
        config=OmegaConf.create({"objectives": ["val_score"], "hydra": {"sweep": {"dir": str(tmp_path)}}}),
        hydra_context=SimpleNamespace(config_loader=None), validate_batch_is_legal=lambda batch: None,
    )
    with pytest.raises(ConfigError, match=r"names 2 objective\(s\) but objectives=\['val_score'\] makes each"):
        sweep(sweeper, ["x=interval(0, 1)"])
    assert sweeper.launcher.batches == []


def test_a_stored_study_keeps_its_directions(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    options = dict(sampler={"name": "random", "seed": 3}, storage=storage, study_name="s", n_trials=2, n_jobs=2)
    run_sweep(tmp_path, lambda p: [1.0, 2.0], ["x=interval(0, 1)"], direction=["maximize", "minimize"], **options)
    with pytest.raises(ConfigError, match=r"direction=maximize but the stored study 's' .* is set to "
                                          r"\[maximize, minimize\]"):
        run_sweep(tmp_path, lambda p: 1.0, ["x=interval(0, 1)"], direction="maximize", **options)


class _RecordingPool:
    """A worker pool that runs no process: each submitted job returns at the next wait, in order."""

    def __init__(self, events: list):
        self.events, self.running, self.count = events, [], 0

    def spawn(self, env) -> None:
        pass

    def submit(self, env, payload):
        import cloudpickle

        self.count += 1
        worker = SimpleNamespace(id=self.count, idx=cloudpickle.loads(payload)[1])
        self.events.append(("start", worker.idx))
        self.running.append(worker)
        return worker

    def wait(self, workers):
        import cloudpickle

        worker = self.running.pop(0)
        self.events.append(("return", worker.idx))
        return [(worker, cloudpickle.dumps(JobReturn(overrides=[], status=JobStatus.COMPLETED)))]

    def shutdown(self, grace, interrupted=0.0) -> None:
        pass


@pytest.mark.parametrize("ahead", [True, False], ids=["jobs known up front", "a stream"])
def test_known_jobs_are_composed_while_the_slots_are_busy(ahead):
    """A batch's next job is composed before a slot frees, so the slot starts it at once; a stream
    (a sweeper that picks from the returns) is asked only when a slot is free."""
    from hydra_plugins.pipeline_gpu_launcher._core import _Job, _Sweep
    from hydra_plugins.pipeline_gpu_launcher._slots import Slot

    events: list = []
    jobs = iter(range(3))

    def next_job():
        idx = next(jobs, None)
        events.append(("compose", idx))
        return None if idx is None else _Job(idx, [f"seed={idx}"], {"seed": idx})

    sweep = _Sweep([Slot(0, (), (), Fraction(0), 1)], b"")
    sweep.pool = _RecordingPool(events)
    returned = []
    sweep.run(next_job, lambda job, ret: returned.append(job.idx), compose_ahead=ahead)
    assert returned == [0, 1, 2]
    composed_second, first_returned = events.index(("compose", 1)), events.index(("return", 0))
    assert (composed_second < first_returned) == ahead, events
