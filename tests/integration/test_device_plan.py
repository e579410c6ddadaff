"""Each model's device in a dry run: chosen by the fit-time estimate and said in the plan, and checked
without starting CUDA in the driver."""

from __future__ import annotations

import json

import pytest

from pipeline.run import Runtime, run

pytestmark = pytest.mark.slow


def plan_models(run_dir) -> dict:
    return {m["name"]: m for m in json.loads((run_dir / "plan.json").read_text())["models"]}


def test_ten_million_rows_put_xgboost_on_the_gpu_and_the_plan_says_why(compose, tmp_path, capsys):
    cfg = compose(["+hardware=1gpu", "hardware.num_cpus=16", "model=gbm_gpu", "data=synthetic",
                   "data.rows=10000000", "data.features=50", "dry_run=true", "tracking=none"])
    run(cfg, Runtime(tmp_path / "run", tmp_path))
    models = plan_models(tmp_path / "run")
    assert (models["xgboost"]["device"], models["lightgbm"]["device"]) == ("cuda", "cpu")
    assert models["xgboost"]["fit"]["num_gpus"] == 1 and models["lightgbm"]["fit"]["num_gpus"] == 0
    assert models["xgboost"]["device_reason"].startswith("cuda: est. ")
    assert "on 16 CPU threads" in models["xgboost"]["device_reason"]
    assert f"device {models['xgboost']['device_reason']}" in capsys.readouterr().out.replace("\n│   │   ", " ")


def test_on_adult_nothing_that_loses_goes_to_the_gpu(compose, tmp_path):
    cfg = compose(["+hardware=1gpu", "hardware.num_cpus=16", "model=gbm_gpu", "dry_run=true", "tracking=none"])
    run(cfg, Runtime(tmp_path / "run", tmp_path))
    models = plan_models(tmp_path / "run")
    assert {m["device"] for m in models.values()} == {"cpu"}
    assert all(m["fit"]["num_gpus"] == 0 for m in models.values())
    assert all(" vs " in m["device_reason"] for m in models.values())  # each with its estimate


def test_a_gpu_dry_run_starts_no_cuda_in_the_driver(compose, tmp_path, monkeypatch):
    """On a box with an NVIDIA driver the checks reach no CUDA runtime in the driver: XGBoost's parameter
    check configures its booster in a child process that sees no device, and nothing touches torch.cuda."""
    import torch

    import pipeline.models.native as native

    def in_the_driver(*args, **kwargs):
        raise AssertionError("a check started CUDA in the driver")

    monkeypatch.setenv("PIPELINE_CACHE_DIR", str(tmp_path / "cache"))  # no kept answer: XGBoost is asked
    monkeypatch.setattr(native, "cuda_driver_present", lambda: True)  # as on a GPU box
    monkeypatch.setattr(native, "_xgboost_configure", in_the_driver)
    for name in ("_lazy_init", "init", "is_available", "device_count", "current_device", "set_device"):
        monkeypatch.setattr(torch.cuda, name, in_the_driver)
    cfg = compose(["+hardware=4gpu", "hardware.num_cpus=16", "model=all", "model.lightgbm.device=cuda",
                   "model.xgboost.device=cuda", "model.nn.device=cuda", "dry_run=true", "tracking=none"])
    run(cfg, Runtime(tmp_path / "run", tmp_path))
    models = plan_models(tmp_path / "run")
    assert {m["device"] for m in models.values()} == {"cuda"}
    assert list((tmp_path / "cache" / "xgboost-params").glob("*.json"))  # the child's answer, kept
