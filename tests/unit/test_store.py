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
