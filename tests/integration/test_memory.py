"""Memory through the CLI: estimates in the plan, memory-capped parallelism, the error for a fit that
fits nowhere, and estimates held within a factor of 2 of the peaks the fits reach."""

import json

import pytest

pytestmark = pytest.mark.slow


def plan_of(tmp_path):
    return json.loads(sorted((tmp_path / "outputs" / "runs").glob("*/*/plan.json"))[-1].read_text())


def run_dir_of(tmp_path):
    return sorted((tmp_path / "outputs" / "runs").glob("*/*"))[-1]


def fits_at_once(plan, model):
    m = next(m for m in plan["models"] if m["name"] == model)
    return m["folds_parallel"] * m["trials_parallel"]


GPU_CASE = ["+hardware=1gpu", "hardware.num_cpus=16", "model=nn_gpu", "data=synthetic", "data.rows=20000000",
            "parallelism=bag8", "parallelism.fit.num_gpus=0.25", "dry_run=true"]


def test_gpu_memory_plans_fewer_fits_per_device_and_says_why(cli, tmp_path):
    cli(*GPU_CASE, check=True)
    unlimited = plan_of(tmp_path)
    proc = cli(*GPU_CASE, "hardware.gpu_memory_gb=6", check=True)
    limited = plan_of(tmp_path)
    assert fits_at_once(unlimited, "nn") == 4
    assert fits_at_once(limited, "nn") == 2
    memory = limited["models"][0]["memory"]
    assert memory["estimate"]["gpu_mb"] > 2048  # 20M rows: more than a quarter of 6 GiB per fit
    assert "GPU memory" in memory["limited_by_memory"][0]
    assert limited["models"][0]["fit"]["num_gpus"] == 0.5
    assert "limited by memory" in proc.stdout and "each fit takes 0.5 GPU instead of 0.25" in proc.stdout


# One CPU per fit, set: the engine would otherwise run these folds one at a time with 2 threads each
# on this 2-core machine (pipeline/planning/payoff.py), and memory would have nothing left to limit.
CPU_CASE = ["+hardware=cpu", "model=lightgbm", "data=synthetic", "data.rows=100000", "parallelism=bag5",
            "parallelism.fit.num_cpus=1", "model.lightgbm.params.num_iterations=20", "tracking=none"]


def test_folds_that_do_not_fit_in_ram_together_run_one_at_a_time(cli, tmp_path):
    """On this machine two folds run at once; with a declared RAM that holds one fit, they run in turn."""
    cli(*CPU_CASE, "dry_run=true", check=True)
    plan = plan_of(tmp_path)
    assert fits_at_once(plan, "lightgbm") == 2
    reserved = plan["models"][0]["memory"]["reserved_ram_mb"]
    driver = plan["memory"]["capacity"]["driver_mb"]
    memory_gb = (driver + 1.5 * reserved) / 1024
    proc = cli(*CPU_CASE, f"hardware.memory_gb={memory_gb:.3f}", check=True)
    plan = plan_of(tmp_path)
    assert fits_at_once(plan, "lightgbm") == 1
    assert "RAM" in plan["models"][0]["memory"]["limited_by_memory"][0]
    assert "limited by memory" in proc.stdout
    timeline = sorted(json.loads((run_dir_of(tmp_path) / "timeline.json").read_text()), key=lambda e: e["start"])
    assert len(timeline) == 5
    assert all(a["end"] <= b["start"] for a, b in zip(timeline, timeline[1:]))  # never two fits at once


def test_a_fit_that_fits_nowhere_is_an_error_before_anything_starts(cli, tmp_path):
    proc = cli("+hardware=cpu", "hardware.memory_gb=0.8", "model=lightgbm", "data=synthetic", "data.rows=1000000",
               "tracking=none")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    message = proc.stdout + proc.stderr
    assert "model 'lightgbm': one fit needs about" in message
    assert "hardware.memory_gb=0.8" in message and "data.max_rows=" in message
    assert not list(tmp_path.glob("outputs/runs/*/*/data/data.pkl"))  # nothing was loaded or fitted


def test_a_stated_fit_limit_below_the_estimate_is_an_error_naming_the_key(cli, tmp_path):
    proc = cli("model=lightgbm", "parallelism.fit.memory_gb=0.05", "dry_run=true", "tracking=none")
    assert proc.returncode == 2
    assert "model 'lightgbm': one fit needs about" in proc.stderr
    assert "parallelism.fit.memory_gb=0.05 allows" in proc.stderr


# Each case runs in its own CLI process with a worker of its own, so each peak is one fit's.
FAST = {"lightgbm": "model.lightgbm.params.num_iterations=20", "xgboost": "model.xgboost.params.num_boost_round=20",
        "nn": "model.nn.params.max_epochs=1"}
DATA = {"adult": [], "synthetic_1m": ["data=synthetic", "data.rows=1000000"]}


@pytest.mark.parametrize("data", list(DATA))
@pytest.mark.parametrize("model", list(FAST))
def test_cpu_estimates_are_within_a_factor_of_two_of_the_measured_peaks(cli, tmp_path, model, data):
    overrides = [f"model={model}", FAST[model], *DATA[data], "executor.in_process=never", "tracking=none"]
    if model == "nn" and data != "adult":
        overrides += ["model.nn.params.batch_size=4096", "model.nn.params.hidden_sizes=[64,32]"]  # a quick epoch
    proc = cli(*overrides, timeout=600, check=True)
    rows = json.loads((run_dir_of(tmp_path) / "memory.json").read_text())
    (row,) = rows
    assert row["peak_ram_mb"] > 100, row  # a real measurement: the process with its libraries
    assert 0.5 <= row["estimate_ram_mb"] / row["peak_ram_mb"] <= 2.0, row
    assert "estimate vs measured peak" in proc.stdout
    (fit,) = json.loads((run_dir_of(tmp_path) / "timeline.json").read_text())
    assert fit["peak_ram_mb"] == row["peak_ram_mb"] and fit["estimate_ram_mb"] == row["estimate_ram_mb"]
