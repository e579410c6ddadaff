"""A one-node SLURM cluster on loopback for the tests: munged, slurmctld and slurmd from Debian's
slurm-wlm and munge, configured in a temporary directory, stopped at the end of the session.

The node declares 4 GPUs as generic resources backed by character devices that exist everywhere
(/dev/null, /dev/zero, ...): SLURM schedules them and sets CUDA_VISIBLE_DEVICES / SLURM_JOB_GPUS for a
job as it does for real GPUs, and the jobs see them through PIPELINE_SIMULATE_GPUS=4.
Plugins that need cgroups are avoided (proctrack/linuxproc, task/none), so it runs in a container.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.testing.backend_contract import _alive, _gone
from tests.conftest import ROOT, free_port

TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel")
GPU_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom")


@dataclass
class Cluster:
    dir: Path
    env: dict  # what a process needs to use this cluster (and to import this checkout's pipeline)

    def run(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(list(args), env={**os.environ, **self.env}, capture_output=True, text=True,
                              timeout=60)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc.stdout

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.dir.glob("*.log")))


def _missing() -> str | None:
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        return f"no SLURM here ({', '.join(absent)} not found): install slurm-wlm and munge (.ci/run does)"
    if os.geteuid() != 0:
        return "the test cluster runs slurmd as root (SlurmdUser=root); these tests need root"
    if not all(Path(f).exists() for f in GPU_FILES):
        return f"the generic-resource device files {GPU_FILES} are not all present"
    return None


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    reason = _missing()
    if reason:
        pytest.skip(reason)
    d = tmp_path_factory.mktemp("slurm")
    host = socket.gethostname().split(".")[0]
    (d / "munge").mkdir(mode=0o700)
    (d / "state").mkdir()
    (d / "spool").mkdir()
    key = d / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = d / "munge" / "munge.sock"
    subprocess.run(["munged", "--force", f"--socket={sock}", f"--key-file={key}", f"--pid-file={d / 'munged.pid'}",
                    f"--log-file={d / 'munged.log'}", f"--seed-file={d / 'munge' / 'seed'}"], check=True)
    cpus = os.cpu_count() or 1
    (d / "slurm.conf").write_text(f"""\
ClusterName=pipelinetest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmdPidFile={d / 'slurmd.pid'}
SlurmctldLogFile={d / 'slurmctld.log'}
SlurmdLogFile={d / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=10
GresTypes=gpu
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=4000 Gres=gpu:{len(GPU_FILES)} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    (d / "gres.conf").write_text("".join(f"NodeName={host} Name=gpu File={f}\n" for f in GPU_FILES))
    cluster = Cluster(d, {
        "SLURM_CONF": str(d / "slurm.conf"),
        "PIPELINE_SIMULATE_GPUS": str(len(GPU_FILES)),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")]),
    })
    try:
        subprocess.run(["slurmctld", "-c", "-f", str(d / "slurm.conf")], check=True, env={**os.environ, **cluster.env})
        subprocess.run(["slurmd", "-f", str(d / "slurm.conf")], check=True, env={**os.environ, **cluster.env})
        deadline = time.time() + 60
        while time.time() < deadline:
            state = cluster.run("sinfo", "-h", "-N", "-o", "%T", check=False).strip()
            if state == "idle":
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the test SLURM node never became idle (state {state!r}):\n{cluster.logs()}")
        yield cluster
    finally:
        cluster.run("scancel", "--full", "--user", "root", check=False)
        _stop([d / name for name in ("slurmd.pid", "slurmctld.pid", "munged.pid")])


def _stop(pid_files: list[Path]) -> None:
    """Stop the daemons this fixture started, by the pids they wrote: all signalled at once (each takes 1-2 s
    to exit), killed if still there 5 s later."""
    pids = []
    for pid_file in pid_files:
        try:
            pid = int(pid_file.read_text().strip())
            os.kill(pid, 15)
        except (OSError, ValueError):  # no pid written, or the daemon is gone
            continue
        pids.append(pid)
    _gone(pids, timeout=5)
    for pid in filter(_alive, pids):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:  # it exited after the last look
            pass
