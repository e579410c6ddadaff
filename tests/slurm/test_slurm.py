"""`hydra/launcher=slurm` against a real SLURM (the one-node cluster of conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import user_config
from tests.integration.mlflow_helpers import runs
from tests.plugins.test_plugins_cli import job_dirs, sweep_dir

pytestmark = pytest.mark.slow


def test_a_four_job_sweep_asks_slurm_for_the_hardware_group_and_logs_four_child_runs(slurm, cli, tmp_path):
    cli("-m", "hydra/launcher=slurm", "+hardware=1gpu", "hardware.num_cpus=1", "model=lightgbm",
        "data.max_rows=800", "model.lightgbm.params.num_iterations=30", "seed=range(4)",
        env=slurm.env, check=True, timeout=500)
    (script,) = sweep_dir(tmp_path).glob(".submitit/*/*_submission.sh")
    text = script.read_text()
    assert "#SBATCH --gpus-per-node=1" in text and "#SBATCH --cpus-per-task=1" in text
    jobs = job_dirs(tmp_path)
    assert sorted(jobs) == [0, 1, 2, 3]
    for job in jobs.values():
        hardware = json.loads((job / "plan.json").read_text())["hardware"]
        assert (hardware["num_cpus"], hardware["num_gpus"], hardware["source"]) == (1, 1.0, "1gpu")
        # the one GPU SLURM bound to the job, as CUDA_VISIBLE_DEVICES named it for the fit
        assert len({e["cuda_visible_devices"] for e in json.loads((job / "timeline.json").read_text())}) == 1
    _, all_runs = runs(tmp_path)
    (parent,) = [r for r in all_runs if r.data.tags.get("pipeline.sweep") == "parent"]
    children = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 4 and {r.info.status for r in children} == {"FINISHED"}
    assert parent.info.status == "FINISHED"


def test_a_job_signalled_mid_fit_is_requeued_and_resumes_with_its_finished_folds(slurm, tmp_path):
    searchpath = user_config(
        tmp_path, "model", "sleepy", "sleepy:\n  _target_: tests.fault_models.SleepModel\n  params: {seconds: 3}\n",
    )
    # no +hardware: the job plans for what SLURM gave it (1 of this node's CPUs, 2 of its 4 GPUs)
    args = ["-m", "hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.gpus_per_node=2",
            "model=sleepy", searchpath, "allowed_targets=[tests.]", "parallelism.num_folds=6",
            "data.max_rows=300", "tracking=none", "seed=0"]
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", *args], cwd=tmp_path,
                            env={**os.environ, **slurm.env}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            done = list(tmp_path.glob("outputs/multirun/*/*/0/tasks/*.pkl"))
            if done:
                break
            time.sleep(0.3)
        else:
            pytest.fail(f"no fold finished in time:\n{slurm.logs()}")
        (job_id,) = slurm.run("squeue", "-h", "-o", "%i").split()
        # what SLURM sends before preempting a job (submitit asks for USR2): submitit requeues it
        slurm.run("scancel", "--signal=USR2", job_id)
        # SLURM holds a requeued job back for a while (reason BeginTime) because slurmd refuses a
        # launch whose credential is dated the same second as the kill ("already killed, do not
        # launch batch job"). Release it once it has been held two seconds, each time it is held.
        held_since: dict[str, float] = {}
        finish_by = time.time() + 400
        while time.time() < finish_by and proc.poll() is None:
            pending = slurm.run("squeue", "-h", "-t", "PENDING", "-o", "%i %r").split()
            if pending[1:2] == ["BeginTime"]:
                since = held_since.setdefault(pending[0], time.time())
                if time.time() - since >= 2:
                    slurm.run("scontrol", "update", f"JobId={pending[0]}", "StartTime=now")
                    del held_since[pending[0]]
            time.sleep(0.3)
        if proc.poll() is None:
            pytest.fail("the requeued job did not finish in 400 s; queue: "
                        f"{slurm.run('squeue', '-h', '-o', '%i %T %r')!r}\n{slurm.logs()}")
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out + slurm.logs()
    (job,) = job_dirs(tmp_path).values()
    assert json.loads((job / "run_state.json").read_text())["status"] == "FINISHED"
    timeline = json.loads((job / "timeline.json").read_text())
    cached = [e for e in timeline if e["cached"]]
    assert len(timeline) == 6 and 1 <= len(cached) < 6  # the folds finished before the signal were reused
    hardware = json.loads((job / "plan.json").read_text())["hardware"]
    assert (hardware["num_cpus"], hardware["num_gpus"], hardware["source"]) == (1, 2.0, "detected")
    logs = "".join(p.read_text() for p in sweep_dir(tmp_path).glob(".submitit/*/*_log.*"))
    assert "requeue" in logs.lower()
