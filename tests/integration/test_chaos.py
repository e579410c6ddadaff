"""SIGKILL the driver at random points, resume each time: the same leaderboard, no half-written file."""

import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml


pytestmark = pytest.mark.slow

# The network trains for about half a second a fold (30 epochs of 17 batches), so a kill "mid-fit" lands
# while it trains on after its first checkpoint
ARGS = ["model=all", "parallelism.num_folds=3", "parallelism.fit.num_cpus=1", "data.max_rows=1000",
        "model.nn.params.max_epochs=30", "model.nn.params.patience=0", "model.nn.params.batch_size=32",
        "model.lightgbm.params.num_iterations=30", "model.xgboost.params.num_boost_round=30", "tracking=none"]
SEED = 13  # the order of the phases and the moments within them: a failure replays with the same draws
PHASES = ["start-up", "a fold just finished", "mid-fit"]


def check_whole(run_dir: Path) -> None:
    """Every file a run publishes under its directory reads back whole; temporaries are never read."""
    import torch

    from pipeline.graph.datafile import read_data_fingerprint

    for path in run_dir.rglob("*"):
        if path.is_dir() or path.name == ".lock" or path.name.endswith(".tmp"):
            continue
        if path.name == "data.pkl":
            assert read_data_fingerprint(path) is not None, path
            with open(path, "rb") as fh:
                pickle.load(fh), pickle.load(fh)
        elif path.suffix == ".pkl":
            pickle.loads(path.read_bytes())
        elif path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".csv":
            assert not pd.read_csv(path).empty, path
        elif path.suffix == ".yaml":
            yaml.safe_load(path.read_text())
        elif path.suffix == ".pt":
            torch.load(path, weights_only=False)


def kill_driver(proc: subprocess.Popen) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """SIGKILL the driver only (as the OOM killer or a node failure would). Returns what it had
    started: its own children (the forkserver, multiprocessing's resource tracker) and the fit
    workers below them."""
    try:
        direct = psutil.Process(proc.pid).children()
        workers = [w for d in direct for w in d.children(recursive=True)]
    except psutil.NoSuchProcess:
        direct, workers = [], []
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return direct, workers


def outliving(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those of procs still running after timeout. A zombie has exited (its parent has not yet reaped
    it) and can write nothing, so it does not count."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [p for p in alive if _status(p) not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)]


def _status(proc: psutil.Process) -> str:
    try:
        return proc.status()
    except psutil.NoSuchProcess:
        return psutil.STATUS_DEAD


def finished_tasks(run_dir: Path) -> int:
    return len(list((run_dir / "tasks").glob("*.pkl")))


def checkpoints_since(run_dir: Path, since: float) -> int:
    return sum(p.stat().st_mtime > since for p in run_dir.glob("checkpoints/*/last.pt"))


def kill_point(phase: str, run_dir: Path, started: float, rng: random.Random):
    """A condition that becomes true at a random moment of the given phase of the run."""
    if phase == "start-up":  # imports, data loading, worker start
        after = rng.uniform(0.5, 3.0)
        return lambda: time.time() - started > after
    extra = rng.uniform(0.0, 0.5)
    if phase == "a fold just finished":
        before = finished_tasks(run_dir) if run_dir.exists() else 0
        count = lambda: finished_tasks(run_dir) if run_dir.exists() else 0  # noqa: E731
    else:  # "mid-fit": a network has written an epoch's checkpoint and trains on
        before, count = 0, lambda: checkpoints_since(run_dir, started) if run_dir.exists() else 0  # noqa: E731
    seen = []

    def reached() -> bool:
        if not seen and count() > before:
            seen.append(time.time())
        return bool(seen) and time.time() - seen[0] > extra

    return reached


def scores(run_dir: Path) -> pd.DataFrame:
    board = pd.read_csv(run_dir / "leaderboard.csv").set_index("model").sort_index()
    return board[[c for c in board.columns if c.startswith(("val_", "test_"))]]


def test_sigkilled_again_and_again_then_resumed_ends_as_an_uninterrupted_run(cli, tmp_path):
    reference = tmp_path / "reference"
    t0 = time.monotonic()
    cli(*ARGS, f"hydra.run.dir={reference}", check=True, timeout=300)
    duration = time.monotonic() - t0

    run_dir = tmp_path / "chaos"
    rng = random.Random(SEED)
    kills = []
    for phase in rng.sample(PHASES, len(PHASES)):
        started = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "pipeline", *ARGS, f"hydra.run.dir={run_dir}"], cwd=tmp_path,
                                env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        reached = kill_point(phase, run_dir, started, rng)
        while proc.poll() is None and not reached() and time.time() - started < 120:
            time.sleep(0.02)
        if proc.poll() is not None:  # it finished before the kill point: nothing left to interrupt
            break
        kills.append((phase, round(time.time() - started, 1)))
        helpers, workers = kill_driver(proc)
        alive = outliving(workers, timeout=5)
        assert not alive, f"fit workers outlived their driver: {alive}"  # no orphan writes into run_dir
        alive = outliving(helpers, timeout=60)  # a forkserver still importing notices later
        assert not alive, f"processes outlived their driver: {alive}"
        check_whole(run_dir)
    assert len(kills) >= 2, f"the runs finished before they could be killed: {kills}"

    cli(*ARGS, f"hydra.run.dir={run_dir}", check=True, timeout=300)
    check_whole(run_dir)
    assert not list(run_dir.rglob("*.tmp"))  # the resumed run cleared what the killed ones left
    assert json.loads((run_dir / "run_state.json").read_text())["status"] == "FINISHED"
    print(f"killed (phase, seconds after start): {kills}; an uninterrupted run took {duration:.1f} s")
    pd.testing.assert_frame_equal(scores(run_dir), scores(reference))
