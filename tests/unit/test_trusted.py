"""Files the engine unpickles are refused unless this user (or root) alone could have written them
(pipeline.trusted): a malicious pickle planted as a symlink, as another user's file, as a file or in a
folder others may write, never runs; what the engine writes itself passes the checks under umask 0."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pipeline.trusted import UntrustedFile, open_trusted

NOBODY = 65534


class Payload:
    """Unpickling it creates `marker`: proof that a planted pickle ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return os.makedirs, (self.marker,)


def malicious(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(Payload(marker)))
    path.chmod(0o644)


def malicious_torch(path: Path, marker: Path) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": Payload(marker)}, path)
    path.chmod(0o644)


# ---- how a file is planted where the engine reads one: each leaves `path` holding a payload


def as_symlink(path, write, tmp_path):
    elsewhere = tmp_path / "elsewhere" / "evil.pkl"  # this user's own file, so only the link gives it away
    write(elsewhere)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(elsewhere)
    return "is a symbolic link"


def of_another_user(path, write, tmp_path):
    write(path)
    os.chown(path, NOBODY, NOBODY)
    return f"belongs to uid {NOBODY}"


def others_may_write(path, write, tmp_path):
    write(path)
    path.chmod(0o666)
    return "is writable by other users (mode 0666"


def group_may_write(path, write, tmp_path):
    write(path)
    path.chmod(0o664)
    return "is writable by other users (mode 0664"


def in_a_folder_others_may_write(path, write, tmp_path):
    write(path)
    path.parent.chmod(0o777)
    return f"is in a folder ({path.parent}) writable by other users (mode 0777)"


def in_a_folder_of_another_user(path, write, tmp_path):
    write(path)
    os.chown(path.parent, NOBODY, NOBODY)
    return f"is in a folder ({path.parent}) that belongs to uid {NOBODY}"


def hard_linked_into_a_sticky_folder(path, write, tmp_path):
    elsewhere = tmp_path / "elsewhere" / "evil.pkl"
    write(elsewhere)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o1777)  # as /tmp: anyone may add a name
    os.link(elsewhere, path)
    return "has 2 hard links in a folder other users may write into"


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user (chown) needs root")
ATTACKS = [pytest.param(f, id=f.__name__, marks=[needs_root] if "another_user" in f.__name__ else [])
           for f in (as_symlink, of_another_user, others_may_write, group_may_write,
                     in_a_folder_others_may_write, in_a_folder_of_another_user, hard_linked_into_a_sticky_folder)]


# ---- where the engine reads one: each returns (the file to plant, a call that loads it)


def store_result(tmp_path):
    from pipeline.store import ResultStore

    store = ResultStore(tmp_path / "run")
    return store.dir / "k.pkl", lambda: store.get("k")


def store_result_of_an_earlier_run(tmp_path):
    from pipeline.store import ResultStore

    earlier = ResultStore(tmp_path / "earlier")
    store = ResultStore(tmp_path / "run", [tmp_path / "earlier"])
    return earlier.dir / "k.pkl", lambda: store.get("k")


def data_file_in_a_worker(tmp_path):
    from pipeline.graph.datafile import read_data_file

    path = tmp_path / "run" / "data" / "data.pkl"
    return path, lambda: read_data_file(str(path), "fingerprint")


def data_file_in_the_driver(tmp_path):
    from pipeline.graph.datafile import write_data_file

    path = tmp_path / "run" / "data" / "data.pkl"  # the driver reads the fingerprint of the one there
    return path, lambda: write_data_file(path, SimpleNamespace(fingerprint="fingerprint"))


def predictor(tmp_path):
    from pipeline.predictor_source import load_predictor

    run_dir = tmp_path / "run"
    path = run_dir / "predictors" / "lightgbm.pkl"
    return path, lambda: load_predictor(str(run_dir), "lightgbm", None, tmp_path)


READERS = [store_result, store_result_of_an_earlier_run, data_file_in_a_worker, data_file_in_the_driver,
           predictor]


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("reader", READERS, ids=lambda f: f.__name__)
def test_a_planted_pickle_is_refused_and_never_runs(tmp_path, reader, attack):
    marker = tmp_path / "the_payload_ran"
    path, load = reader(tmp_path)
    problem = attack(path, lambda p: malicious(p, marker), tmp_path)
    with pytest.raises(UntrustedFile) as refused:
        load()
    assert str(path) in str(refused.value) and problem in str(refused.value)
    assert not marker.exists()


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_planted_checkpoint_is_refused_and_never_runs(tmp_path, attack):
    from tests.unit.test_nn import ACC, CPU, SPEC

    from pipeline.nn.loop import Loop, LoopConfig

    marker, folder = tmp_path / "the_payload_ran", tmp_path / "checkpoints" / "k"
    problem = attack(folder / "last.pt", lambda p: malicious_torch(p, marker), tmp_path)
    loop = Loop(SPEC, LoopConfig(max_epochs=1), "binary", ACC, CPU, checkpoint_dir=folder)
    with pytest.raises(UntrustedFile, match="last.pt") as refused:
        loop._load_checkpoint()
    assert problem in str(refused.value)
    assert not marker.exists()


def test_a_checkpoint_of_this_user_loads_only_tensors_and_plain_values(tmp_path):
    """A checkpoint passing every check is still loaded with weights_only: a payload in it never runs."""
    from tests.unit.test_nn import ACC, CPU, SPEC

    from pipeline.nn.loop import Loop, LoopConfig

    marker, folder = tmp_path / "the_payload_ran", tmp_path / "checkpoints" / "k"
    malicious_torch(folder / "last.pt", marker)
    loop = Loop(SPEC, LoopConfig(max_epochs=1), "binary", ACC, CPU, checkpoint_dir=folder)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        loop._load_checkpoint()
    assert not marker.exists()


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_planted_checkpoint_of_an_earlier_run_is_not_copied_into_this_one(tmp_path, attack):
    """Copying would make the file this user's: the copy checks it first, and copies nothing."""
    from pipeline.store import ResultStore

    earlier = ResultStore(tmp_path / "earlier").checkpoint_dir("k") / "last.pt"
    problem = attack(earlier, lambda p: malicious_torch(p, tmp_path / "unused"), tmp_path)
    with pytest.raises(UntrustedFile) as refused:
        ResultStore(tmp_path / "run", [tmp_path / "earlier"]).checkpoint_dir("k")
    assert problem in str(refused.value)
    assert not (tmp_path / "run" / "checkpoints" / "k").exists()


def test_a_file_of_this_user_in_a_sticky_shared_folder_is_read(tmp_path):
    """A folder anyone may add names to, where no one else may rename or remove this user's files (/tmp)."""
    from pipeline.store import ResultStore

    store = ResultStore(tmp_path / "run")
    store.put("k", {"score": 1.0})
    store.dir.chmod(0o1777)
    assert store.get("k") == {"score": 1.0}


@needs_root
def test_files_of_root_are_trusted_as_this_users_are(tmp_path, monkeypatch):
    """Root could replace anything of this user's anyway; files it wrote (a container's, say) are read."""
    from pipeline.store import ResultStore

    store = ResultStore(tmp_path / "run")
    store.put("k", {"score": 1.0})  # the tests run as root: the file and folder are root's
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert store.get("k") == {"score": 1.0}
    os.chown(store.dir / "k.pkl", 1000, 1000)
    os.chown(store.dir, 1000, 1000)
    assert store.get("k") == {"score": 1.0}
    os.chown(store.dir / "k.pkl", 1001, 1001)
    with pytest.raises(UntrustedFile, match="belongs to uid 1001, not to this user \\(uid 1000\\) or root"):
        store.get("k")


def test_the_best_predictors_name_is_read_only_from_a_trusted_file(tmp_path):
    from pipeline.predictor_source import load_predictor

    (tmp_path / "run" / "predictors").mkdir(parents=True)
    best = tmp_path / "run" / "predictors" / "BEST"
    best.write_text("lightgbm")
    best.chmod(0o666)
    with pytest.raises(UntrustedFile, match="BEST is writable by other users"):
        load_predictor(str(tmp_path / "run"), "best", None, tmp_path)


def test_the_refusal_is_a_user_error_the_cli_prints(tmp_path):
    from pipeline.errors import PipelineError
    from pipeline.tracking.secure import UnsafeFile

    path = tmp_path / "x.pkl"
    path.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UntrustedFile) as refused:
        open_trusted(path)
    assert isinstance(refused.value, PipelineError) and refused.value.exit_code == 2
    assert isinstance(refused.value, UnsafeFile)  # what the tracker's file checks raise too


@pytest.fixture
def umask_0():
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_what_the_engine_writes_passes_its_own_checks_under_umask_0(tmp_path, umask_0):
    from pipeline.graph.datafile import read_data_file, write_data_file
    from pipeline.outputs import save_predictors
    from pipeline.store import ResultStore, RunDirectoryLock

    run_dir = tmp_path / "run"
    with RunDirectoryLock(run_dir):
        store = ResultStore(run_dir)
        store.put("k", {"score": 1.0})
        data = SimpleNamespace(fingerprint="fp", values=np.arange(100.0))
        write_data_file(run_dir / "data" / "data.pkl", data)
        save_predictors(run_dir, {"lightgbm": {"trees": 3}}, "lightgbm")
        copied = ResultStore(tmp_path / "later", [run_dir])
        assert copied.get("k") == {"score": 1.0}  # copied from the earlier run, and read back
        assert store.get("k") == {"score": 1.0}
        mapped = read_data_file(str(run_dir / "data" / "data.pkl"), "fp")
        np.testing.assert_array_equal(mapped.values, data.values)
    written = [p for p in tmp_path.rglob("*") if p != run_dir]  # the run directory is Hydra's in a run
    assert len(written) >= 10
    loose = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in written
             if p.stat().st_mode & 0o022}
    assert loose == {}


def test_a_network_checkpoint_is_written_so_that_it_loads_under_umask_0(tmp_path, umask_0):
    from tests.unit.test_nn import arrays, run

    from pipeline.nn.loop import LoopConfig

    folder = tmp_path / "checkpoints" / "k"
    run(LoopConfig(max_epochs=1, batch_size=64), arrays(n=200), checkpoint_dir=folder)
    assert stat.S_IMODE((folder / "last.pt").stat().st_mode) == 0o644
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert stat.S_IMODE(folder.parent.stat().st_mode) == 0o755
    resumed = run(LoopConfig(max_epochs=2, batch_size=64), arrays(n=200), checkpoint_dir=folder)
    assert resumed.epochs_run == 2 and len(resumed.history["train_loss"]) == 2


def test_a_temporary_left_with_loose_permissions_or_planted_as_a_symlink_is_never_written_through(tmp_path):
    from pipeline.store import ResultStore, temporary_name

    store = ResultStore(tmp_path / "run")
    loose = temporary_name(store.dir / "a.pkl")
    loose.write_bytes(b"left by a killed run")
    loose.chmod(0o666)
    store.put("a", 1)
    assert stat.S_IMODE((store.dir / "a.pkl").stat().st_mode) == 0o644 and store.get("a") == 1
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched")
    temporary_name(store.dir / "b.pkl").symlink_to(victim)
    with pytest.raises(OSError):
        store.put("b", 2)
    assert victim.read_bytes() == b"untouched"
