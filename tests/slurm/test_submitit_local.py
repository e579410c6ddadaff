"""`hydra/launcher=slurm_local`: the submitit path of hydra/launcher=slurm, without a SLURM cluster."""

from __future__ import annotations

import json

import pytest

from tests.integration.mlflow_helpers import runs
from tests.plugins.test_plugins_cli import job_dirs, sweep_dir

pytestmark = pytest.mark.slow


def test_submitit_local_runs_each_job_with_the_hardware_groups_cpus_and_logs_its_child_run(cli, tmp_path):
    cli("-m", "hydra/launcher=slurm_local", "+hardware=cpu", "hardware.num_cpus=1", "model=lightgbm",
        "data.max_rows=800", "model.lightgbm.params.num_iterations=30", "seed=0,1", check=True, timeout=300)
    jobs = job_dirs(tmp_path)
    assert sorted(jobs) == [0, 1]
    for job in jobs.values():
        hardware = json.loads((job / "plan.json").read_text())["hardware"]
        assert (hardware["num_cpus"], hardware["num_gpus"]) == (1, 0.0)
    assert list(sweep_dir(tmp_path).glob(".submitit/*/*_result.pkl"))  # submitit ran them
    _, all_runs = runs(tmp_path)
    (parent,) = [r for r in all_runs if r.data.tags.get("pipeline.sweep") == "parent"]
    children = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 2 and {r.info.status for r in children} == {"FINISHED"}


def test_a_gpu_share_is_refused_for_slurm_before_any_job(cli, tmp_path):
    proc = cli("-m", "hydra/launcher=slurm", "+hardware=1gpu", "hardware.num_gpus=0.5", "seed=0,1",
               "tracking=none", env={"PIPELINE_SIMULATE_GPUS": "1"}, timeout=120)
    assert proc.returncode == 2
    assert "error: hardware.num_gpus=0.5: hydra/launcher=slurm asks SLURM for whole GPUs" in proc.stderr
    assert "Traceback" not in proc.stderr  # one line, as for every config error
    assert not job_dirs(tmp_path)
