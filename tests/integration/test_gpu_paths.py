"""GPU paths through the CLI on a machine without CUDA: derived shares, device order and visibility
(simulated GPUs), and LightGBM's OpenCL learner on whatever OpenCL runtime exists (PoCL in CI)."""

import json
from pathlib import Path

import pytest

from tests.conftest import FAULT_ENV, user_config

pytestmark = pytest.mark.slow
NO_OPENCL = {"OCL_ICD_VENDORS": "/nonexistent/opencl-vendors"}  # the OpenCL loader finds no runtime


def only_run(workdir: Path) -> Path:
    (run_dir,) = sorted((workdir / "outputs" / "runs").glob("*/*"))
    return run_dir


def fits(run_dir: Path) -> list[dict]:
    return [t for t in json.loads((run_dir / "plan.json").read_text())["tasks"] if t["kind"] == "fit"]


@pytest.mark.parametrize("overrides, share", [
    (["+hardware=4gpu", "hardware.num_cpus=32", "parallelism=bag5"], 0.5),
    (["+hardware=2gpu", "hardware.num_cpus=32", "parallelism.num_folds=3"], 0.5),
    (["+hardware=4gpu", "hardware.num_cpus=2", "parallelism=bag5"], 1.0),
])
def test_derived_gpu_shares_pack(cli, tmp_path, overrides, share):
    """The GBM fits' derived share is a whole device or 1/k of one; no key the user never set is blamed."""
    proc = cli("model=gbm_gpu", "model.lightgbm.device=cuda", "model.xgboost.device=cuda", *overrides, "dry_run=true",
               "tracking=none")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tasks = fits(only_run(tmp_path))
    assert {t["num_gpus"] for t in tasks} == {share}
    for wave in {t["wave"] for t in tasks}:
        load = {}
        for t in tasks:
            if t["wave"] == wave:
                for d, s in zip(t["device_ids"], t["gpu_shares"]):
                    load[d] = load.get(d, 0) + s
        assert all(v <= 1 for v in load.values())
        if share == 1.0:  # whole devices: the fits of a wave are on different GPUs
            assert len(load) == sum(1 for t in tasks if t["wave"] == wave)


def test_a_bag_level_without_bagging_warns(cli):
    proc = cli("+hardware=4gpu", "model=nn", "parallelism.bag.num_gpus=2", "parallelism.fit.num_gpus=3",
               "dry_run=true", "tracking=none")
    assert proc.returncode == 0, proc.stderr
    assert "parallelism.bag.num_gpus=2 has no effect: parallelism.num_folds=1" in proc.stdout + proc.stderr


def _sleep_model(tmp_path):
    record = tmp_path / "records"
    text = f"sleep:\n  _target_: tests.fault_models.SleepModel\n  params: {{seconds: 0.2, record_dir: '{record}'}}\n"
    return user_config(tmp_path, "model", "sleep", text), record


@pytest.mark.parametrize("in_process", ["never", "always"])
def test_fits_see_the_planned_devices_in_pci_order(cli, tmp_path, in_process):
    """hardware.devices=[2,3] of four (simulated) GPUs, CUDA's order set to fastest-first by the user:
    worker fits see their one device as ordinal 0; in-process fits use ordinals 2 and 3; all in PCI order."""
    searchpath, record = _sleep_model(tmp_path)
    env = {**FAULT_ENV, "PIPELINE_SIMULATE_GPUS": "4", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
    cli("model=sleep", searchpath, "allowed_targets=[tests.]", "+hardware=2gpu", "hardware.devices=[2,3]",
        "parallelism.num_folds=2", "parallelism.fit.num_cpus=1", "parallelism.fit.num_gpus=1", "data.max_rows=300",
        f"executor.in_process={in_process}", "tracking=none", env=env, check=True)
    seen = [json.loads(p.read_text()) for p in sorted(record.glob("*.json"))]
    assert len(seen) == 2
    assert {r["cuda_device_order"] for r in seen} == {"PCI_BUS_ID"}
    if in_process == "never":  # two workers at once, one device each
        assert sorted(r["gpu_ids"] for r in seen) == [[2], [3]]
    else:  # the driver fits one at a time: each takes an idle device of the two declared
        assert all(len(r["gpu_ids"]) == 1 and r["gpu_ids"][0] in (2, 3) for r in seen)
    for r in seen:
        if in_process == "never":
            assert r["cuda_visible_devices"] == str(r["gpu_ids"][0]) and r["local_gpus"] == [0]
        else:
            assert r["local_gpus"] == r["gpu_ids"] and r["device"] == f"cuda:{r['gpu_ids'][0]}"


# ---------------------------------------------------------------- LightGBM's OpenCL learner


@pytest.fixture(scope="session")
def opencl_device():
    """Skip unless LightGBM's OpenCL learner trains here (PoCL: apt-get install pocl-opencl-icd)."""
    from pipeline.models.lightgbm_gpu import probe

    error = probe({"device_type": "gpu", "max_bin": 63}, {})
    if error is not None:
        pytest.skip(f"no OpenCL device for LightGBM's GPU learner ({error}); install an OpenCL runtime "
                    "such as pocl-opencl-icd")


GBM_SMALL = ["data.max_rows=3000", "model.lightgbm.params.num_iterations=40", "++model.lightgbm.params.max_bin=63",
             "tracking=none"]


def test_lightgbm_trains_on_the_opencl_device(cli, tmp_path, opencl_device):
    """model=gbm_gpu's LightGBM on a simulated GPU: the OpenCL learner trains, the fit record names the
    OpenCL device, and the scores are close to the CPU learner's on the same data."""
    for name in ("gpu", "cpu"):
        (tmp_path / name).mkdir()
    cli("model=gbm_gpu", "~model.xgboost", "model.lightgbm.device=cuda", "+hardware=1gpu", *GBM_SMALL, env={"PIPELINE_SIMULATE_GPUS": "1"},
        cwd=tmp_path / "gpu", timeout=600, check=True)
    cli("model=lightgbm", *GBM_SMALL, cwd=tmp_path / "cpu", check=True)
    gpu_dir, cpu_dir = only_run(tmp_path / "gpu"), only_run(tmp_path / "cpu")
    (fit,) = json.loads((gpu_dir / "timeline.json").read_text())
    assert fit["device"].startswith("opencl:0 (") and fit["device_ids"] == [0]
    (cpu_fit,) = json.loads((cpu_dir / "timeline.json").read_text())
    assert cpu_fit["device"] == "cpu"
    import pandas as pd

    gpu_row = pd.read_csv(gpu_dir / "leaderboard.csv").iloc[0]
    cpu_row = pd.read_csv(cpu_dir / "leaderboard.csv").iloc[0]
    assert gpu_row["device"] == "GPU 0"
    assert abs(gpu_row["test_roc_auc"] - cpu_row["test_roc_auc"]) < 0.01
    assert abs(gpu_row["val_roc_auc"] - cpu_row["val_roc_auc"]) < 0.01


def test_gbm_gpu_lightgbm_fits_are_repeatable(compose, opencl_device):
    """The OpenCL learner with model=gbm_gpu's params, fitted three times with one seed: the same model each time.
    (LightGBM's default, single precision, let the float atomics' order change the predictions, by up to 0.01 on
    Adult here; so gbm_gpu sets gpu_use_dp.)"""
    import numpy as np

    from pipeline.config import DataConf
    from pipeline.data import load
    from pipeline.models import FitContext, LightGBMModel, Placement
    from pipeline.settings import read_settings

    (spec,) = [s for s in read_settings(compose(["model=gbm_gpu"])).models if s.name == "lightgbm"]
    params = spec.on("cuda").params  # as on the GPU: gbm_gpu's gpu_params laid over its params
    assert params["gpu_use_dp"] is True and params["device_type"] == "gpu"
    # 10,000 rows and 60 rounds: single precision differs there by up to 0.012 between fits (at 3,000 rows and
    # 30 rounds it did not), double precision not at all
    params.update(num_iterations=60, early_stopping_round=0)
    data = load(DataConf(max_rows=10_000), Path(__file__).resolve().parents[2])
    ctx = FitContext(data.problem_type, data.num_classes, Placement(2, gpu_ids=(0,), local_gpus=(0,)), seed=0,
                     eval_metric="roc_auc")
    tr, va, te = data.train_idx, data.val_idx, data.test_idx
    predictions = [LightGBMModel(params, "lightgbm").fit(data.X.iloc[tr], data.y[tr], data.X.iloc[va], data.y[va], ctx)
                   .predict_proba(data.X.iloc[te]) for _ in range(3)]
    assert all(np.array_equal(predictions[0], p) for p in predictions[1:]), \
        max(float(np.abs(predictions[0] - p).max()) for p in predictions[1:])


def test_lightgbm_without_an_opencl_runtime_is_refused_before_fitting(cli, tmp_path):
    proc = cli("model=gbm_gpu", "~model.xgboost", "model.lightgbm.device=cuda", "+hardware=1gpu", *GBM_SMALL,
               env={"PIPELINE_SIMULATE_GPUS": "1", **NO_OPENCL})
    assert proc.returncode != 0
    assert "model.lightgbm (LightGBM with device_type=gpu): this LightGBM cannot train on the GPU (No OpenCL " \
           "device found)" in proc.stdout + proc.stderr
    assert "It is on the GPU by cuda: model.lightgbm.device=cuda;" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (only_run(tmp_path) / "timeline.json").exists()
