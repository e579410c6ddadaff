"""Shared fixtures: Hydra composition, the CLI in a scratch directory, small real data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

def model_class(name: str):
    """The model class conf/model/<name>.yaml configures under its own name."""
    import yaml
    from hydra.utils import get_class

    return get_class(yaml.safe_load((CONF / "model" / f"{name}.yaml").read_text())[name]["_target_"])


def small(models=("lightgbm", "xgboost", "nn")) -> list[str]:
    """Fast settings for end-to-end runs of these models (each a conf/model file configuring one model)
    where the full data set is not the point: fewer rows, and each kind's quick params (its profile's)."""
    return ["data.max_rows=4000",
            *(f"model.{m}.params.{k}={v}" for m in models for k, v in model_class(m).profile.quick)]


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def box_turns_lock(tmp_path_factory) -> Path:
    """The lock file every pytest-xdist worker of this session shares (their scratch folders' parent)."""
    return tmp_path_factory.getbasetemp().parent / "box-turns.lock"


@pytest.fixture(autouse=True)
def box_turns(request, tmp_path_factory):
    """A `wall_clock` test (it asserts what a time budget did) never runs while a `floods_the_box` test (many
    runs at once) runs on the other pytest-xdist worker: one flock over the session's scratch, shared by
    the former, exclusive for the latter. Under a burst of load in a whole suite's run, a 20-s stacked run's
    last level-1 fits took four times their usual length (its reserve for level 2 14.2 s against 3.5 s),
    and level 2 still ran past it."""
    floods, timed = (request.node.get_closest_marker(name) for name in ("floods_the_box", "wall_clock"))
    if not (floods or timed):
        yield
        return
    import fcntl

    with open(box_turns_lock(tmp_path_factory), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if floods else fcntl.LOCK_SH)
        yield


@pytest.fixture(scope="session", autouse=True)
def library_answers_cache(tmp_path_factory):
    """The engine's cache of library answers (pipeline.private_cache.folder) in the session's scratch,
    not the user's home; runs started by the tests inherit it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PIPELINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="session", autouse=True)
def tracker_services(tmp_path_factory):
    """Tracker services (pipeline.tracking.service) started by the tests keep their files in the
    session's scratch, never in the user's runtime folder or the real /tmp/pipeline-<uid>, and are
    stopped when the session ends instead of waiting out keep_alive_s."""
    from pipeline.tracking.service import runtime_path

    folder = tmp_path_factory.mktemp("xdg_runtime")
    folder.chmod(0o700)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_RUNTIME_DIR", str(folder))
        if runtime_path() != folder / "pipeline":  # too long for a socket's path: the fallback, kept in scratch too
            mp.setenv("TMPDIR", str(folder))
        yield folder
    stop_services(folder / "pipeline")


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    """A runtime folder of this test's own (short: a socket's path has at most 107 bytes, and a longer
    folder would give way to $TMPDIR unchecked): the services it starts, and only those. Yields
    $XDG_RUNTIME_DIR/pipeline, not yet made."""
    import shutil
    import tempfile

    from pipeline.tracking.service import MAX_FOLDER_BYTES

    base = Path(tempfile.mkdtemp(prefix="xdg-"))
    assert len(os.fsencode(base / "pipeline")) <= MAX_FOLDER_BYTES, base
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    monkeypatch.chdir(tmp_path)
    yield base / "pipeline"
    stop_services(base / "pipeline")
    shutil.rmtree(base, ignore_errors=True)


def stop_services(folder: Path) -> None:
    """Retire every service with a file in `folder`, and kill what has not exited 30 s later."""
    import psutil

    from pipeline.tracking import service

    procs = []
    for pid in service.stop_all(folder):
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=30)
    for proc in alive:
        proc.kill()


@pytest.fixture
def compose():
    """compose(overrides) -> the composed DictConfig, with Hydra's global state cleaned up."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import pipeline.config  # noqa: F401

    def _compose(overrides=(), return_hydra_config=False):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            return hydra_compose("config", overrides=list(overrides), return_hydra_config=return_hydra_config)

    yield _compose
    GlobalHydra.instance().clear()


def run_cli(args, cwd: Path, env=None, timeout=300, check=False) -> subprocess.CompletedProcess:
    """`python -m pipeline ARGS` in `cwd`, so outputs/ (and the MLflow store) land there."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **(env or {})}
    full_env.pop("CUDA_VISIBLE_DEVICES", None) if env is None or "CUDA_VISIBLE_DEVICES" not in env else None
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", *args], cwd=cwd, env=full_env, capture_output=True, text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nSTDOUT:\n{proc.stdout}\nSTDERR:\n{proc.stderr}")
    return proc


@pytest.fixture
def cli(tmp_path):
    def _cli(*args, env=None, timeout=300, check=False, cwd=None):
        return run_cli(list(args), cwd or tmp_path, env=env, timeout=timeout, check=check)

    return _cli


def user_config(root: Path, group: str, name: str, text: str) -> str:
    """Write a config option of the user's own (as a user would, beside the project) and return the
    override that adds its directory to Hydra's search path."""
    folder = root / "user_conf" / group
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)
    return f"hydra.searchpath=[file://{root / 'user_conf'}]"


FAULT_ENV = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")])}  # lets a run import tests.fault_models


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """A real `mlflow server` on 127.0.0.1 with its own SQLite store and artifact folder."""

    def __init__(self, root: Path):
        self.root = root
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self, timeout: float = 90) -> "MlflowServer":
        import time
        import urllib.request

        self.root.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1", "--backend-store-uri", f"sqlite:///{self.root / 'server.db'}",
             "--artifacts-destination", str(self.root / "artifacts")],
            cwd=self.root, env=env, stdout=open(self.root / "server.log", "wb"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError((self.root / "server.log").read_text()[-3000:])
            try:
                with urllib.request.urlopen(self.uri + "/health", timeout=2):
                    return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError("mlflow server did not start in time")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process_group(self.proc)


def stop_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM a server started in its own session, then SIGKILL it if it lingers past 15 s."""
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def printed_plan(plan) -> str:
    """The plan as `print_plan` draws it on a 200-column console, whatever COLUMNS the test runner set."""
    from pipeline import report

    width = report.console.width
    report.console.width = 200
    try:
        with report.console.capture() as printed:
            report.print_plan(plan)
    finally:
        report.console.width = width
    return printed.get()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def default_run(tmp_path_factory):
    """Exactly `python -m pipeline` (bundled Adult, detected hardware, every model, local MLflow), run once
    for every read-only check of what it leaves: (the folder it ran in, its finished process). Its checks
    are in one file (tests/integration/test_cli.py): `make test` gives each pytest-xdist worker whole files,
    and a worker builds its own session fixtures."""
    root = tmp_path_factory.mktemp("default-run")
    return root, run_cli([], root, timeout=400, check=True)


@pytest.fixture(scope="session")
def adult():
    """The bundled Adult data, loaded and split once."""
    from pipeline.config import DataConf
    from pipeline.data import load

    return load(DataConf(max_rows=6000), ROOT)


@pytest.fixture(scope="module")
def ray_instance():
    """One local Ray instance (2 CPUs, no GPU) for tests that run RayBackend in this process (it
    connects to this instance), one per module."""
    import ray  # installed by the project's test setup: pip install -e '.[test,ray]'

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "PYTHONPATH")}
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # Workers unpickle the test models, so they need the project root on their path.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), saved["PYTHONPATH"]) if p)
    ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False,
             logging_level="WARNING")
    yield ray
    ray.shutdown()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
