import os
import subprocess
import sys

import pytest

from pipeline.errors import ConfigError
from pipeline.store import RunDirectoryLock


def test_a_second_run_into_a_busy_directory_is_refused(tmp_path):
    with RunDirectoryLock(tmp_path):
        with pytest.raises(ConfigError, match=r"hydra.run.dir=.*another run \(pid \d+\) is writing"):
            with RunDirectoryLock(tmp_path):
                pass
    with RunDirectoryLock(tmp_path):  # released on exit: a resumed run takes it over
        pass


def test_the_lock_dies_with_its_process(tmp_path):
    code = f"from pipeline.store import RunDirectoryLock; RunDirectoryLock(__import__('pathlib').Path({str(tmp_path)!r})).__enter__(); __import__('os')._exit(0)"
    subprocess.run([sys.executable, "-c", code], check=True)
    with RunDirectoryLock(tmp_path):
        pass


def _crash_while_copying(code: str, tmp_path, files_before_crash: int = 0):
    """Run `code` in a process whose copies die half-way through a file (as SIGKILL would: no
    clean-up runs), after `files_before_crash` whole files."""
    prelude = f"""
import os, shutil, pickle
from pathlib import Path
from pipeline.store import ResultStore
real, done = shutil.copyfileobj, []
def dying_copy(src, dst, *args):
    if len(done) == {files_before_crash}:
        data = src.read()
        dst.write(data[: len(data) // 2])
        dst.flush()
        os._exit(9)
    done.append(src)
    return real(src, dst, *args)
shutil.copyfileobj = dying_copy
"""
    proc = subprocess.run([sys.executable, "-c", prelude + code], cwd=tmp_path)
    assert proc.returncode == 9  # it did die mid-copy


def test_a_crash_while_copying_a_finished_fit_leaves_no_half_file(tmp_path):
    from pipeline.store import ResultStore

    earlier, now = tmp_path / "earlier", tmp_path / "now"
    ResultStore(earlier).put("k", {"scores": list(range(10_000))})
    _crash_while_copying(f"ResultStore(Path({str(now)!r}), [Path({str(earlier)!r})]).get('k')", tmp_path)
    assert not (now / "tasks" / "k.pkl").exists()
    assert ResultStore(now, [earlier]).get("k") == {"scores": list(range(10_000))}


def test_a_crash_while_copying_a_checkpoint_leaves_no_partial_folder(tmp_path):
    from pipeline.store import ResultStore

    earlier, now = tmp_path / "earlier", tmp_path / "now"
    source = ResultStore(earlier).checkpoint_dir("k")
    source.mkdir(parents=True)
    files = {"a.pt": os.urandom(50_000), "b.pt": os.urandom(50_000)}
    for name, data in files.items():
        (source / name).write_bytes(data)
    _crash_while_copying(f"ResultStore(Path({str(now)!r}), [Path({str(earlier)!r})]).checkpoint_dir('k')",
                         tmp_path, files_before_crash=1)
    assert not (now / "checkpoints" / "k").exists()
    target = ResultStore(now, [earlier]).checkpoint_dir("k")
    assert {p.name: p.read_bytes() for p in target.iterdir()} == files


def test_taking_the_lock_removes_what_a_killed_run_left_half_written(tmp_path):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / ".k.pkl.123.tmp").write_bytes(b"half")
    (tmp_path / "checkpoints" / ".k.123.tmp").mkdir(parents=True)
    (tmp_path / "checkpoints" / "k").mkdir()
    (tmp_path / "checkpoints" / "k" / ".last.pt.123.tmp").write_bytes(b"half")
    (tmp_path / "tasks" / "k.pkl").write_bytes(b"whole")
    (tmp_path / "mine").mkdir()  # hydra.run.dir may be a folder of the user's: only the engine's folders are swept
    (tmp_path / "mine" / ".notes.1.tmp").write_bytes(b"keep")
    (tmp_path / ".editor.tmp").write_bytes(b"keep")
    with RunDirectoryLock(tmp_path):
        pass
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.name != ".lock") == [
        ".editor.tmp", "checkpoints", "checkpoints/k", "mine", "mine/.notes.1.tmp", "tasks", "tasks/k.pkl"]


def test_a_result_put_for_later_is_read_from_memory_until_it_is_written(tmp_path):
    """The scheduler writes a fit's result after it has started the next fits: until then the same key
    is answered from memory (a copy: marking it reused leaves the run's own result alone), not as reused."""
    from pipeline.store import ResultStore

    store = ResultStore(tmp_path)
    result = {"scores": [1, 2]}
    store.put("k", result, later=True)
    assert not (tmp_path / "tasks" / "k.pkl").exists()
    copy = store.get("k")
    assert copy == result and copy is not result and store.reused == []
    store.flush()
    assert ResultStore(tmp_path).get("k") == result
    store.put("j", 1)  # written at once
    assert (tmp_path / "tasks" / "j.pkl").exists()
