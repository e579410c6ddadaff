"""Attacks on the tracker's doors. A run sends its calls to a tracker host named by a host file and
unpickles what the host answers: whoever writes that file, or listens on its socket, could run code
in the run. Each test plays the attacker: a forged host file (open to others, another user's, a
symlink), a socket served by another user, a runtime folder that is a symlink or is swapped for one
after it was checked. The attacker's answer, if ever unpickled, creates a marker folder."""

from __future__ import annotations

import json
import os
import socket
from multiprocessing.connection import Client, Listener
from pathlib import Path

import pytest

from pipeline.tracking import host, secure
from pipeline.tracking import service as tracker_service
from pipeline.tracking.client import TrackerClient
from pipeline.tracking.mlflow_run import MlflowTracker
from pipeline.tracking.store import Store
from pipeline.tracking.sweep_host import HOST_FILE

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user (setuid) needs root")


class Payload:
    """What the attacker sends: unpickling it creates `marker`."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def attacker(address: str, authkey: bytes, marker: Path, uid: int | None = None) -> int:
    """Fork a listener at `address` (as `uid`, if given) that sends the payload to whoever connects;
    returns its pid once it listens."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the attacker
        try:
            os.close(ready_r)
            if uid is not None:
                os.setgid(uid)
                os.setuid(uid)
            listener = Listener(address, family="AF_UNIX", authkey=authkey)
            os.write(ready_w, b"1")
            conn = listener.accept()
            conn.send(Payload(str(marker)))
            conn.recv()
        finally:
            os._exit(0)
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"1"
    os.close(ready_r)
    return pid


def stop(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


def host_file(sweep_dir: Path, address: str, authkey: bytes, uri: str, mode: int = 0o600) -> Path:
    path = sweep_dir / HOST_FILE
    path.write_text(json.dumps({"host": socket.gethostname(), "pid": 1, "uri": uri, "address": address,
                                "authkey": authkey.hex()}))
    path.chmod(mode)
    return path


def a_job_run(uri: str, sweep_dir: Path) -> TrackerClient:
    """A sweep job's tracker connecting as a run would: it must end up in a process of its own."""
    tracker = TrackerClient(MlflowTracker(Store(uri), "exp", sweep_dir=str(sweep_dir)))
    tracker.connect()
    return tracker


@pytest.fixture
def public():
    """A folder anyone may reach and write to (pytest's own scratch is closed to other users)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="attacker-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def scene(tmp_path, public):
    """A sweep directory, the public folder (where the attacker listens and leaves its marker), the
    marker's path and a store."""
    sweep_dir = tmp_path / "multirun"
    sweep_dir.mkdir()
    return sweep_dir, public, public / "pwned", f"sqlite:///{tmp_path / 'mlflow.db'}"


@pytest.mark.parametrize("forgery", ["open to others", "a symlink"])
def test_a_forged_host_file_is_never_dialled(scene, caplog, forgery):
    """A host file mode 0666 (anyone could have written it), or a symlink to a file elsewhere: the job
    ignores it, says so, and logs through a process of its own; the listener is never reached."""
    sweep_dir, public, marker, uri = scene
    authkey = os.urandom(32)
    address = str(public / "evil.sock")
    pid = attacker(address, authkey, marker)
    try:
        if forgery == "open to others":
            host_file(sweep_dir, address, authkey, uri, mode=0o666)
        else:
            (sweep_dir / HOST_FILE).symlink_to(host_file(public, address, authkey, uri))
        with caplog.at_level("WARNING", logger="pipeline.tracking.host"):
            tracker = a_job_run(uri, sweep_dir)
        try:
            assert tracker._process is not None and not tracker._shared
        finally:
            tracker.end("FAILED")
        assert os.waitpid(pid, os.WNOHANG) == (0, 0)  # still waiting for a connection: never dialled
        assert not marker.exists()
        assert ("open to other users" if forgery == "open to others" else "symbolic link") in caplog.text
    finally:
        stop(pid)


@needs_root
def test_a_host_file_of_another_user_is_never_dialled(scene, caplog):
    sweep_dir, public, marker, uri = scene
    authkey = os.urandom(32)
    address = str(public / "evil.sock")
    pid = attacker(address, authkey, marker)
    try:
        os.chown(host_file(sweep_dir, address, authkey, uri), NOBODY, NOBODY)
        with caplog.at_level("WARNING", logger="pipeline.tracking.host"):
            tracker = a_job_run(uri, sweep_dir)
        assert tracker._process is not None
        tracker.end("FAILED")
        assert os.waitpid(pid, os.WNOHANG) == (0, 0) and not marker.exists()
        assert f"belongs to uid {NOBODY}" in caplog.text
    finally:
        stop(pid)


@needs_root
def test_a_socket_served_by_another_user_is_refused_before_a_byte_is_read(scene, caplog):
    """The host file is this user's own, but the socket it names is another user's listener that knows
    the key: the job checks the peer (SO_PEERCRED) and reads nothing from it."""
    sweep_dir, public, marker, uri = scene
    authkey = os.urandom(32)
    address = str(public / "evil.sock")
    pid = attacker(address, authkey, marker, uid=NOBODY)
    try:
        host_file(sweep_dir, address, authkey, uri)
        with caplog.at_level("WARNING", logger="pipeline.tracking.host"):
            tracker = a_job_run(uri, sweep_dir)
        assert tracker._process is not None
        tracker.end("FAILED")
        assert not marker.exists()
        assert f"served by uid {NOBODY}" in caplog.text
    finally:
        stop(pid)


@needs_root
def test_a_host_serves_no_peer_of_another_user(public):
    """A host whose socket another user reaches (it knows the key) closes the connection unserved."""
    listener, authkey = host.listen(str(public / "host.sock"))
    os.chmod(public / "host.sock", 0o777)
    server = host.Host(listener)
    server.start()
    try:
        answer_r, answer_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                conn = Client(listener.address, family="AF_UNIX", authkey=authkey)
                try:
                    os.write(answer_w, repr(conn.recv()).encode())
                except EOFError:
                    os.write(answer_w, b"closed")
            finally:
                os._exit(0)
        os.close(answer_w)
        answer = os.read(answer_r, 100)
        os.waitpid(pid, 0)
        assert answer == b"closed" and server.idle_s() > 0  # no "ok", no run served
        conn, reached = host.dial(listener.address, authkey)  # this user's run is served
        assert reached and conn is not None
        conn.close()
    finally:
        server.stop(5)


def test_a_runtime_folder_that_is_a_symlink_is_refused_with_a_warning(tmp_path, runtime, caplog):
    """$XDG_RUNTIME_DIR/pipeline pointing at another private folder of this user (a swap planted
    before the first run): no service, a warning, and nothing written there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    runtime.symlink_to(elsewhere)
    with caplog.at_level("WARNING", logger="pipeline.tracking.service"):
        assert tracker_service.connect(f"sqlite:///{tmp_path / 'mlflow.db'}", 60) == (None, False)
    assert "symbolic link" in caplog.text and os.listdir(elsewhere) == []


def test_a_runtime_folder_swapped_after_its_check_is_not_followed(tmp_path):
    """The folder is checked once and used through its descriptor: replaced by a symlink to another
    folder afterwards, its lock, host file and socket still go to the folder that was checked."""
    path, checked, elsewhere = tmp_path / "pipeline", tmp_path / "checked", tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    folder = tracker_service.RuntimeFolder.open(path)
    try:
        path.rename(checked)
        path.symlink_to(elsewhere)
        with folder.locked("k.lock"):
            folder.write("k.json", {"address": "x", "authkey": "00"})
        listener, _ = host.listen(folder.socket_address("k.sock"))
        listener.close()
        assert folder.read("k.json") == {"address": "x", "authkey": "00"}
    finally:
        folder.close()
    assert os.listdir(elsewhere) == []
    assert {"k.lock", "k.json"} <= set(os.listdir(checked))


def test_private_files_are_written_whole_and_never_through_a_symlink(tmp_path):
    fd = secure.open_private_dir(tmp_path / "folder", create=True)
    try:
        target = tmp_path / "target"
        target.write_text("untouched")
        os.symlink(target, tmp_path / "folder" / "f.lock")
        with pytest.raises(OSError):
            secure.open_private_file("f.lock", os.O_RDWR | os.O_CREAT, fd)
        secure.write_private("f.json", b"{}", fd)
        assert os.stat("f.json", dir_fd=fd).st_mode & 0o777 == 0o600
    finally:
        os.close(fd)
    assert target.read_text() == "untouched"


def test_a_run_whose_runtime_folder_is_refused_says_so_and_logs_on_its_own(runtime, tmp_path):
    """Through the CLI: another user's (here: a world-writable) runtime folder costs the run its warm
    service, not its tracking, and the run says why."""
    from tests.conftest import run_cli

    runtime.mkdir()
    runtime.chmod(0o777)
    proc = run_cli(["model=lightgbm", "data.max_rows=1500", "model.lightgbm.params.num_iterations=20"], tmp_path,
                   check=True)
    assert "no tracker service" in proc.stderr + proc.stdout and "open to other users" in proc.stderr + proc.stdout
    assert os.listdir(runtime) == []
    from tests.integration.mlflow_helpers import job_runs

    _, runs = job_runs(tmp_path)
    assert [r.info.status for r in runs] == ["FINISHED"]
