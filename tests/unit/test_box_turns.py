"""The suite's own turns on the box (tests/conftest.py: box_turns): a time-budget test holds a shared lock
that a test flooding the box with runs must wait for."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import box_turns_lock

PROBE = "import fcntl, sys\nfcntl.flock(open(sys.argv[1], 'a'), getattr(fcntl, sys.argv[2]) | fcntl.LOCK_NB)"


def _try(lock, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, str(lock), mode], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.wall_clock
def test_a_time_budget_test_keeps_a_flood_out_and_lets_another_timed_test_in(tmp_path_factory):
    lock = box_turns_lock(tmp_path_factory)
    flood = _try(lock, "LOCK_EX")
    assert flood.returncode != 0 and "BlockingIOError" in flood.stderr
    assert _try(lock, "LOCK_SH").returncode == 0


@pytest.mark.floods_the_box
def test_a_flood_keeps_every_time_budget_test_out(tmp_path_factory):
    timed = _try(box_turns_lock(tmp_path_factory), "LOCK_SH")
    assert timed.returncode != 0 and "BlockingIOError" in timed.stderr

