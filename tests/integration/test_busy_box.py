"""A run started beside processes that keep every CPU busy: its fits take one CPU each, said on the terminal,
and the run ends with its board; the same command with the fits' CPUs set keeps them as set. Processes that
start spinning while a run fits: its later fits start with the CPUs they leave."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.floods_the_box]

SMALL = ["data.max_rows=2000", "model.lightgbm.params.num_iterations=30",
         "model.xgboost.params.num_boost_round=30",
         "model.nn.params.max_epochs=2", "tracking=none"]


@contextmanager
def busy_loops():
    """One spinning process per CPU this process may use, for the block's length."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(len(os.sched_getaffinity(0)))]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def _plan(run_dir) -> dict:
    models = json.loads((run_dir / "plan.json").read_text())["models"]
    return {m["name"]: m["fit"]["num_cpus"] for m in models}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a fit on one CPU is all a one-CPU machine has")
def test_fits_beside_busy_processes_take_one_cpu_each_unless_their_cpus_were_set(cli, tmp_path):
    with busy_loops():
        capped = cli(*SMALL, "hydra.run.dir=capped", check=True)
        every = len(os.sched_getaffinity(0))
        chosen = cli(*SMALL, f"parallelism.fit.num_cpus={every}", "hydra.run.dir=chosen", check=True)
    said = " ".join(capped.stdout.split())
    assert "the machine is busy (other processes kept" in said and "takes at most 1 of its" in said
    assert set(_plan(tmp_path / "capped").values()) == {1}
    assert (tmp_path / "capped" / "leaderboard.csv").is_file()
    assert "the machine is busy" not in chosen.stdout
    assert set(_plan(tmp_path / "chosen").values()) == {every}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a fit on one CPU is all a one-CPU machine has")
def test_fits_starting_after_other_processes_began_spinning_take_the_cpus_they_leave(tmp_path):
    """Three folds of a network one after the other, each planned with every CPU; busy loops start once the
    plan is printed: a later fold starts with one thread, and the run says so."""
    log = tmp_path / "run.log"
    args = ["model=nn", "model.nn.params.max_epochs=100", "model.nn.params.patience=100",
            "data.max_rows=2000", "parallelism.num_folds=3", "parallelism.sequential=true", "tracking=none",
            "hydra.run.dir=run"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    with log.open("w") as out:
        run = subprocess.Popen([sys.executable, "-m", "pipeline", *args], cwd=tmp_path, env=env, stdout=out,
                               stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.time() + 120
            while "Plan:" not in log.read_text() and run.poll() is None and time.time() < deadline:
                time.sleep(0.05)
            with busy_loops():
                assert run.wait(timeout=300) == 0, log.read_text()
        finally:
            run.kill()
    said = " ".join(log.read_text().split())
    assert "the machine got busy while the run fitted (other processes kept" in said
    assert "fits starting from now take at most 1 of the" in said
    timeline = json.loads((tmp_path / "run" / "timeline.json").read_text())
    folds = [e for e in timeline if e["task"].startswith("fit/")]
    assert len(folds) == 3 and folds[-1]["threads"] == 1  # the plan's CPUs stay its record: num_cpus
