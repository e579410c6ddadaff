"""The tracker service (tracking.keep_alive_s): the first tracked run starts it, the next ones log
through it with MLflow warm; it exits when idle, is replaced when killed, is never shared across
launch directories or environments, and no more than MAX_SERVICES wait at once."""

import json
import os
import time
from pathlib import Path

import psutil
import pytest

from pipeline.tracking import service as tracker_service
from pipeline.tracking.service_key import service_key
from pipeline.tracking.client import TrackerClient
from pipeline.tracking.mlflow_run import MlflowTracker
from pipeline.tracking.store import Store
from tests.conftest import run_cli, small
from tests.integration.mlflow_helpers import job_runs


def services(folder: Path) -> dict[str, int]:
    """key -> pid of each service with a file in `folder`."""
    return {p.stem: json.loads(p.read_text())["pid"] for p in folder.glob("*.json")}


def one_run(uri: str, keep_alive_s: float, name: str = "a run") -> TrackerClient:
    tracker = TrackerClient(MlflowTracker(Store(uri), "exp"), keep_alive_s=keep_alive_s)
    tracker.connect()
    tracker.start(name, {"alpha": 1}, {})
    tracker.log_metrics({"loss": 0.5})
    run_id = tracker.run_id
    tracker.end("FINISHED")
    assert tracker.failure is None
    tracker.logged_run_id = run_id
    return tracker


def finished(uri: str, run_id: str) -> bool:
    import mlflow

    run = mlflow.MlflowClient(uri).get_run(run_id)
    return run.info.status == "FINISHED" and run.data.metrics == {"loss": 0.5}


def wait_gone(pid: int, timeout_s: float = 30) -> bool:
    try:
        psutil.Process(pid).wait(timeout_s)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        return False
    return True


def test_the_run_that_starts_the_service_and_the_next_log_through_it(tmp_path, runtime):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = one_run(uri, keep_alive_s=60)
    assert first._process is None and first._plots_here  # no process of its own; it started the service
    (key, pid), = services(runtime).items()
    assert psutil.Process(pid).is_running()  # the service outlives the run
    second = one_run(uri, keep_alive_s=60, name="second")
    assert second._process is None and not second._plots_here  # served, warm
    assert services(runtime) == {key: pid}
    assert finished(uri, first.logged_run_id) and finished(uri, second.logged_run_id)
    assert os.stat(runtime).st_mode & 0o777 == 0o700 and os.stat(runtime / f"{key}.json").st_mode & 0o777 == 0o600


def test_keep_alive_0_starts_no_service(tmp_path, runtime):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = TrackerClient(MlflowTracker(Store(uri), "exp"), keep_alive_s=0)
    tracker.connect()
    try:
        assert tracker._process is not None
    finally:
        tracker.end("FAILED")
    assert not runtime.exists() or services(runtime) == {}


def test_the_service_exits_once_keep_alive_passes_without_a_run(tmp_path, runtime):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    one_run(uri, keep_alive_s=2)
    (key, pid), = services(runtime).items()
    assert wait_gone(pid)
    assert services(runtime) == {} and not (runtime / f"{key}.sock").exists()


def test_a_killed_service_is_replaced_by_the_next_run(tmp_path, runtime):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    one_run(uri, keep_alive_s=60)
    (key, pid), = services(runtime).items()
    psutil.Process(pid).kill()
    assert wait_gone(pid)
    assert services(runtime) == {key: pid}  # its file and socket are left behind
    again = one_run(uri, keep_alive_s=60)
    assert again._process is None and again._plots_here and finished(uri, again.logged_run_id)
    (new_key, new_pid), = services(runtime).items()
    assert new_key == key and new_pid != pid


def test_a_store_deleted_between_runs_is_never_written_through_the_old_service(tmp_path, runtime):
    """The service's pooled connections reach the file it opened: once that is deleted (rm -rf
    outputs), the next run retires it and logs to the new store through a new service."""
    db = tmp_path / "outputs" / "mlflow.db"
    db.parent.mkdir()
    uri = f"sqlite:///{db}"
    one_run(uri, keep_alive_s=60)
    (key, pid), = services(runtime).items()
    deadline = time.time() + 60
    while json.loads((runtime / f"{key}.json").read_text()).get("store") is None and time.time() < deadline:
        time.sleep(0.1)  # the service notes the file once its first run has ended
    import shutil

    shutil.rmtree(db.parent)
    db.parent.mkdir()
    again = one_run(uri, keep_alive_s=60)
    assert finished(uri, again.logged_run_id)
    (new_key, new_pid), = services(runtime).items()
    assert new_key == key and new_pid != pid and wait_gone(pid)


def test_other_directories_and_environments_get_services_of_their_own_and_at_most_two_wait(
        tmp_path, runtime, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    one_run(uri, keep_alive_s=60)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "7")  # MLflow would behave differently
    one_run(uri, keep_alive_s=60)
    first_two = services(runtime)
    assert len(first_two) == 2
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)  # a relative store path would name another file
    one_run(uri, keep_alive_s=60)
    now = services(runtime)
    assert len(now) == tracker_service.MAX_SERVICES == 2 and len(set(now) - set(first_two)) == 1
    retired = [pid for key, pid in first_two.items() if key not in now]
    assert len(retired) == 1 and wait_gone(retired[0])


def test_a_runs_opt_out_of_mlflows_usage_data_reaches_the_process_that_logs_it(tmp_path, runtime,
                                                                                 monkeypatch):
    """MLflow sends usage data unless DO_NOT_TRACK or MLFLOW_DISABLE_TELEMETRY says not to, read in the
    process that logs: a service started by a run without the opt-out must not serve a run that has it."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.delenv("DO_NOT_TRACK", raising=False)
    one_run(uri, keep_alive_s=60)
    (before,) = services(runtime).values()
    monkeypatch.setenv("DO_NOT_TRACK", "true")
    one_run(uri, keep_alive_s=60)
    (serving,) = set(services(runtime).values()) - {before}
    assert psutil.Process(serving).environ().get("DO_NOT_TRACK") == "true"


def test_the_key_holds_what_a_tracker_depends_on_and_not_the_rest_of_the_environment(tmp_path):
    env = {"HOME": "/home/u", "MLFLOW_TRACKING_TOKEN": "a", "PWD": "/x", "SHLVL": "1"}
    key = service_key("sqlite:///a.db", tmp_path, env)
    # a terminal's bookkeeping, and what a library sets for itself on import (hwloc's, through torch)
    same = {**env, "PWD": "/y", "SHLVL": "3", "_": "/bin/env", "TERM": "xterm", "HWLOC_PLUGINS_PATH": "/dev/null"}
    assert service_key("sqlite:///a.db", tmp_path, same) == key
    for changed in ({"MLFLOW_TRACKING_TOKEN": "b"}, {"AWS_ACCESS_KEY_ID": "k"}, {"https_proxy": "http://p:3128"},
                    {"PYTHONPATH": "/elsewhere"}, {"KRB5CCNAME": "FILE:/tmp/krb5cc_1"}, {"NETRC": "/etc/netrc"},
                    {"REQUESTS_CA_BUNDLE": "/etc/ca.pem"}, {"DO_NOT_TRACK": "true"},
                    {"XDG_CONFIG_HOME": "/c"}, {"MPLCONFIGDIR": "/m"}):
        assert service_key("sqlite:///a.db", tmp_path, {**env, **changed}) != key, changed
    assert service_key("sqlite:///a.db", tmp_path / "sub", env) != key
    assert service_key("sqlite:///b.db", tmp_path, env) != key  # MLflow has one URI per process


def test_the_key_changes_with_the_credential_files_and_the_installed_packages(tmp_path, monkeypatch):
    """MLflow's HTTP auth reads ~/.netrc (or $NETRC) and a Kerberos cache; an upgrade of one of MLflow's
    dependencies changes what it does: a service started before either would log differently."""
    home = tmp_path / "home"
    home.mkdir()
    cache = tmp_path / "krb5cc"
    cache.write_text("ticket 1")
    env = {"HOME": str(home), "KRB5CCNAME": f"FILE:{cache}"}
    key = service_key("sqlite:///a.db", tmp_path, env)
    (home / ".netrc").write_text("machine mlflow.example login u password p\n")
    with_netrc = service_key("sqlite:///a.db", tmp_path, env)
    assert with_netrc != key
    cache.write_text("ticket 2, renewed")
    assert service_key("sqlite:///a.db", tmp_path, env) != with_netrc
    renewed = service_key("sqlite:///a.db", tmp_path, env)
    packages = tmp_path / "lib" / "site-packages"
    packages.mkdir(parents=True)
    monkeypatch.setattr("sys.path", [*__import__("sys").path, str(packages)])
    before = service_key("sqlite:///a.db", tmp_path, env)
    assert before != renewed
    st = packages.stat()
    os.utime(packages, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # pip installed or removed one
    assert service_key("sqlite:///a.db", tmp_path, env) != before


def test_the_key_changes_when_the_engines_code_changes(tmp_path):
    module = Path(tracker_service.__file__)
    key = service_key("sqlite:///a.db", tmp_path, {})
    st = module.stat()
    try:
        os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        assert service_key("sqlite:///a.db", tmp_path, {}) != key
    finally:
        os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert service_key("sqlite:///a.db", tmp_path, {}) == key


def test_a_runtime_folder_too_long_for_a_socket_gives_way_to_the_temporary_folder(tmp_path, runtime, monkeypatch):
    import tempfile

    deep = tmp_path / ("x" * 90)
    deep.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # $TMPDIR, never the real /tmp
    assert tracker_service.runtime_path() == tmp_path / f"pipeline-{os.getuid()}"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime.parent))  # short enough
    assert tracker_service.runtime_path() == runtime


def test_a_runtime_folder_others_can_write_is_refused_with_a_warning(runtime, caplog):
    runtime.mkdir()
    runtime.chmod(0o777)
    with caplog.at_level("WARNING", logger="pipeline.tracking.service"):
        assert tracker_service.runtime_folder() is None
        assert tracker_service.connect("sqlite:///a.db", 60) == (None, False)
    assert "open to other users" in caplog.text and f"Remove {runtime}" in caplog.text
    assert os.listdir(runtime) == []


def test_cluster_jobs_and_sweep_jobs_log_through_processes_of_their_own(tmp_path, runtime, monkeypatch, compose):
    from pipeline.settings import read_settings
    from pipeline.tracking import factory as trackers

    monkeypatch.setenv("SLURM_JOB_ID", "42")
    tracker = TrackerClient(MlflowTracker(Store(f"sqlite:///{tmp_path / 'mlflow.db'}"), "exp"), keep_alive_s=60)
    tracker.connect()
    try:
        assert tracker._process is not None and not runtime.exists()
    finally:
        tracker.end("FAILED")
    conf = read_settings(compose([])).conf.tracking
    assert trackers.mlflow_tracker(conf, tmp_path)._keep_alive_s == conf.keep_alive_s == 600
    assert trackers.mlflow_tracker(conf, tmp_path, sweep_dir=tmp_path / "multirun")._keep_alive_s == 0


@pytest.mark.slow
def test_a_run_that_fails_its_data_checks_starts_no_service(tmp_path, runtime):
    """The data is checked before the tracker connects: a constant label (found only once the rows are
    read) fails the run, and no tracker service is left behind."""
    (tmp_path / "constant.csv").write_text("x,y\n" + "".join(f"{i},1\n" for i in range(50)))
    env = {"XDG_RUNTIME_DIR": os.environ["XDG_RUNTIME_DIR"]}
    proc = run_cli(["data=csv", "data.path=constant.csv", "data.label=y", "model=lightgbm"], tmp_path, env=env)
    assert proc.returncode != 0 and "data.label='y' is constant" in proc.stderr
    assert not runtime.exists() or services(runtime) == {}


@pytest.mark.slow
def test_a_second_cli_run_is_served_and_its_plots_are_drawn_by_the_service(tmp_path, runtime):
    args = ["model=lightgbm", *small(("lightgbm",))]
    env = {"XDG_RUNTIME_DIR": os.environ["XDG_RUNTIME_DIR"]}
    run_cli(args, tmp_path, env=env, check=True)
    (key, pid), = services(runtime).items()  # started by the first run, which has exited
    run_cli(args, tmp_path, env=env, check=True)
    assert services(runtime) == {key: pid}
    assert psutil.Process(pid).is_running()
    client, runs = job_runs(tmp_path)
    assert [r.info.status for r in runs] == ["FINISHED", "FINISHED"]
    for run in runs:
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"timeline.png", "learning_curves.png", "feature_importance.png", "leaderboard.csv"} <= artifacts


@pytest.mark.parametrize("leaving, code", [("time.sleep(1); os._exit(9)", 9), ("raise SystemExit(3)", 3)],
                         ids=["dies", "raises"])
def test_a_driver_that_leaves_without_ending_its_run_leaves_it_failed_and_the_service_serving(
        tmp_path, runtime, leaving, code):
    import subprocess
    import sys
    import textwrap

    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    one_run(uri, keep_alive_s=60)  # the service is up and warm
    (key, pid), = services(runtime).items()
    script = textwrap.dedent(f"""
        import os
        import sys
        import time
        from pipeline.tracking.client import TrackerClient
        from pipeline.tracking.mlflow_run import MlflowTracker
        from pipeline.tracking.store import Store
        if __name__ == "__main__":
            t = TrackerClient(MlflowTracker(Store({uri!r}), "exp"), keep_alive_s=60)
            t.connect()
            assert t._process is None and not t._plots_here, (t._process, t._plots_here)
            t.start("doomed", {{}}, {{}})
            t.log_metrics({{"loss": 0.5}})
            print(t.run_id, flush=True)
            {leaving}
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr
    run_id = proc.stdout.strip().splitlines()[-1]
    client = mlflow.MlflowClient(uri)
    deadline = time.time() + 60
    while time.time() < deadline and client.get_run(run_id).info.status == "RUNNING":
        time.sleep(0.2)
    run = client.get_run(run_id)
    assert run.info.status == "FAILED" and run.data.metrics == {"loss": 0.5}
    after = one_run(uri, keep_alive_s=60)
    assert after._process is None and not after._plots_here and services(runtime) == {key: pid}
