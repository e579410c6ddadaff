"""A two-node Ray cluster on loopback (`ray start --head` + `ray start --address`), each node
declaring two GPUs: fractional-GPU fits run on both nodes, each sees the GPU Ray gave it, and the
run records host, node and device per fit."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import ray  # noqa: F401  installed by the project's test setup: pip install -e '.[test,ray]'

from tests.conftest import FAULT_ENV, free_port, user_config

pytestmark = pytest.mark.slow

WAIT_FOR_NODES = """
import sys, time, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
deadline = time.time() + 90
while sum(1 for n in ray.nodes() if n["Alive"]) < int(sys.argv[2]):
    if time.time() > deadline:
        sys.exit("the Ray node did not join")
    time.sleep(0.5)
"""


def _ray_start(args: list[str], env: dict) -> subprocess.Popen:
    """`ray start --block` in its own session, so the teardown stops exactly these processes."""
    ray_cli = str(Path(sys.executable).with_name("ray"))
    ports = ["--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--metrics-export-port",
             "--runtime-env-agent-port"]
    port_args = [f"{flag}={free_port()}" for flag in ports]
    return subprocess.Popen([ray_cli, "start", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                             "--num-gpus=2", "--disable-usage-stats", *port_args, *args], env=env,
                            start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def two_node_cluster():
    """The cluster's address; both nodes' processes are stopped (by process group) at the end."""
    temp = tempfile.mkdtemp(prefix="ray2n-")  # short: Ray's socket paths must stay under 108 bytes
    env = {**os.environ, **FAULT_ENV, "RAY_AUTH_MODE": "disabled"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    port = free_port()
    address = f"127.0.0.1:{port}"
    nodes = [_ray_start(["--head", f"--port={port}", "--include-dashboard=false", f"--dashboard-port={free_port()}", f"--temp-dir={temp}"], env)]
    try:
        for expected in (1, 2):  # the head first: a node started before the head's GCS listens gives up
            if expected == 2:
                nodes.append(_ray_start([f"--address={address}"], env))
            subprocess.run([sys.executable, "-c", WAIT_FOR_NODES, address, str(expected)], env=env, check=True,
                           timeout=120, capture_output=True)
        yield address
    finally:
        for proc in reversed(nodes):
            _stop(proc)
        shutil.rmtree(temp, ignore_errors=True)


def test_fractional_gpu_fits_run_on_both_nodes(cli, tmp_path, two_node_cluster):
    record = tmp_path / "records"
    searchpath = user_config(tmp_path, "model", "sleep", "sleep:\n  _target_: tests.fault_models.SleepModel\n"
                             f"  params: {{seconds: 1.0, record_dir: '{record}'}}\n")
    cli("model=sleep", searchpath, "allowed_targets=[tests.]", "executor=ray", f"executor.address={two_node_cluster}",
        "parallelism.num_folds=4", "parallelism.fit.num_cpus=1", "parallelism.fit.num_gpus=0.5", "data.max_rows=300",
        env={**FAULT_ENV, "RAY_AUTH_MODE": "disabled"}, timeout=240, check=True)
    (run_dir,) = sorted((tmp_path / "outputs" / "runs").glob("*/*"))
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["hardware"]["num_gpus"] == 4  # planned against the cluster: 2 nodes x 2 GPUs
    timeline = json.loads((run_dir / "timeline.json").read_text())
    assert len(timeline) == 4
    assert len({e["node"] for e in timeline}) == 2  # fits ran on both nodes
    seen = {r["pid"]: r for r in (json.loads(p.read_text()) for p in record.glob("*.json"))}
    for e in timeline:
        task_saw = seen[e["pid"]]
        assert task_saw["cuda_visible_devices"] in ("0", "1")  # one GPU of its node, as Ray assigned it
        assert e["cuda_visible_devices"] == task_saw["cuda_visible_devices"]
        assert e["device_ids"] == [int(task_saw["cuda_visible_devices"])] and task_saw["local_gpus"] == [0]
        assert task_saw["cuda_device_order"] == "PCI_BUS_ID"
        assert e["gpu_shares"] == [0.5]
    load: dict[tuple, float] = {}
    for t, sign, e in sorted([(e["start"], 1, e) for e in timeline] + [(e["end"], -1, e) for e in timeline],
                             key=lambda x: (x[0], x[1])):
        key = (e["node"], e["cuda_visible_devices"])
        load[key] = load.get(key, 0) + sign * 0.5
        assert load[key] <= 1.0

    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    (experiment,) = [x for x in client.search_experiments() if x.name != "Default"] or client.search_experiments()
    (run,) = client.search_runs([experiment.experiment_id])
    tag = run.data.tags["pipeline.gpu_ids"]
    hosts = tag.split(" ")
    assert len(hosts) == 2, tag  # one entry per node: host/node:ids
    assert {h.split(":")[0].split("/")[1] for h in hosts} == {e["node"][:8] for e in timeline}


def test_planning_against_a_cluster_leaves_no_connection(two_node_cluster, monkeypatch):
    """The planner reads the cluster's size through a connection it closes: no ray.init global is left."""
    from pipeline.executors.ray import look_at_cluster

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert not ray.is_initialized()
    machine = look_at_cluster(two_node_cluster, {}).machine
    assert machine.num_cpus == 4 and machine.num_gpus == 4  # two nodes of 2 CPUs and 2 GPUs
    assert not ray.is_initialized()


def test_a_fit_no_node_can_hold_is_refused_by_a_dry_run(cli, two_node_cluster):
    """4 CPUs over two nodes of 2: a 3-CPU fit fits the total but no node; the dry run says so, with the
    node list planning read, before a plan is shown."""
    proc = cli("model=lightgbm", "executor=ray", f"executor.address={two_node_cluster}", "dry_run=true",
               "parallelism.fit.num_cpus=3", "tracking=none", env={**FAULT_ENV, "RAY_AUTH_MODE": "disabled"},
               timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "asks for 3 CPU / 0 GPU" in proc.stderr and "the largest node 2 CPU / 2 GPU" in proc.stderr
    assert "Traceback" not in proc.stderr and "dry run: plan written" not in proc.stdout
