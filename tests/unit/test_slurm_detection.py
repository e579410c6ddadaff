"""Inside a SLURM job the engine plans for what SLURM gave the job, not the whole node."""

import pytest

from pipeline.errors import HardwareError
from pipeline.hardware import SIMULATE_ENV, SLOT_CPUS_ENV, detect, job_cpus

SLURM = ("SLURM_JOB_ID", "SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")


@pytest.fixture
def node(monkeypatch):
    """A node with 4 simulated GPUs and at least 2 CPUs, outside any SLURM job."""
    for key in SLURM:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv(SIMULATE_ENV, "4")
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    return monkeypatch


def test_outside_slurm_the_whole_node_is_seen(node):
    node.setenv("SLURM_CPUS_PER_TASK", "1")  # left over in a shell, without a job: ignored
    machine = detect()
    assert (machine.num_cpus, machine.gpu_tokens) == (4, ("0", "1", "2", "3"))


def test_a_slurm_job_gets_its_cpus_and_the_gpus_slurm_gave_it(node):
    node.setenv("SLURM_JOB_ID", "17")
    node.setenv("SLURM_CPUS_PER_TASK", "2")
    node.setenv("SLURM_JOB_GPUS", "1,3")
    machine = detect()
    assert (machine.num_cpus, machine.gpu_tokens) == (2, ("1", "3"))


def test_a_slurm_job_without_cpus_per_task_gets_its_cpus_on_the_node(node):
    node.setenv("SLURM_JOB_ID", "17")
    node.setenv("SLURM_CPUS_ON_NODE", "3")
    assert detect().num_cpus == 3


def test_cuda_visible_devices_set_by_slurm_wins_over_the_node_indices(node):
    node.setenv("SLURM_JOB_ID", "17")
    node.setenv("SLURM_JOB_GPUS", "1,3")
    node.setenv("CUDA_VISIBLE_DEVICES", "0")  # device binding renumbers what the job sees
    assert detect().gpu_tokens == ("0",)


def test_a_malformed_slurm_cpu_count_is_a_hardware_error(node):
    node.setenv("SLURM_JOB_ID", "17")
    node.setenv("SLURM_CPUS_PER_TASK", "two")
    with pytest.raises(HardwareError, match="SLURM_CPUS_PER_TASK='two' is not a CPU count"):
        detect()


@pytest.mark.parametrize("env, cpus", [
    ({}, 4),
    ({"SLURM_JOB_ID": "17", "SLURM_CPUS_PER_TASK": "2"}, 2),
    ({SLOT_CPUS_ENV: "3"}, 3),  # a launcher slot's share
    ({"SLURM_JOB_ID": "17", "SLURM_CPUS_ON_NODE": "3", SLOT_CPUS_ENV: "1"}, 1),
])
def test_the_jobs_cpus_are_detects_without_looking_for_gpus(node, env, cpus):
    node.delenv(SLOT_CPUS_ENV, raising=False)
    for key, value in env.items():
        node.setenv(key, value)
    node.setattr("pipeline.hardware._detect_devices", lambda: pytest.fail("job_cpus looked for GPUs"))
    assert job_cpus() == cpus
