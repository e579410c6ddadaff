"""Resume reuses only what belongs to this run: the data, the libraries, the run directory."""

import json
import os
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow

LIGHTGBM = ["model=lightgbm", "parallelism.num_folds=2", "executor.in_process=never",
            "model.lightgbm.params.num_iterations=30", "tracking=none"]


def scores(run_dir: Path) -> pd.DataFrame:
    board = pd.read_csv(run_dir / "leaderboard.csv").set_index("model").sort_index()
    return board[[c for c in board.columns if c.startswith(("val_", "test_"))]]


def timeline(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "timeline.json").read_text())


def test_a_reused_run_directory_with_other_data_fits_the_new_data(cli, tmp_path):
    """The workers' data file is rewritten when the data changes, not fitted stale."""
    run_dir = tmp_path / "D"
    cli(*LIGHTGBM, "data.max_rows=1500", f"hydra.run.dir={run_dir}", check=True)
    cli(*LIGHTGBM, "data.max_rows=3000", f"hydra.run.dir={run_dir}", check=True)
    assert not any(e["cached"] for e in timeline(run_dir))
    cli(*LIGHTGBM, "data.max_rows=3000", f"hydra.run.dir={tmp_path / 'fresh'}", check=True)
    pd.testing.assert_frame_equal(scores(run_dir), scores(tmp_path / "fresh"))


def _fake_upgrade(root: Path, distribution: str, version: str) -> str:
    """A folder whose package metadata says `distribution` is at `version` (the installed module
    still imports): put first on PYTHONPATH, it is what an upgraded environment reports."""
    info = root / "upgraded" / f"{distribution}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    return str(root / "upgraded")


def test_an_upgraded_library_refits_instead_of_reusing(cli, tmp_path):
    run_dir = tmp_path / "D"
    args = [*LIGHTGBM, "data.max_rows=1500", f"hydra.run.dir={run_dir}"]
    cli(*args, check=True)
    cli(*args, check=True)
    assert all(e["cached"] for e in timeline(run_dir))  # same environment: reused
    upgraded = _fake_upgrade(tmp_path, "lightgbm", "99.0.0")
    cli(*args, env={"PYTHONPATH": os.pathsep.join([upgraded, os.environ.get("PYTHONPATH", "")])}, check=True)
    assert not any(e["cached"] for e in timeline(run_dir))


def test_resume_true_never_picks_a_live_run(cli, tmp_path):
    """The newest unfinished directory belongs to a run still alive (its lock is held): resume=true
    takes the older interrupted one."""
    from pipeline.store import RunDirectoryLock, write_state

    runs = tmp_path / "outputs" / "runs" / "2026-01-01"
    args = [*LIGHTGBM, "data.max_rows=1500"]
    cli(*args, f"hydra.run.dir={runs / 'interrupted'}", check=True)
    write_state(runs / "interrupted", status="KILLED")
    live = runs / "live"
    (live / "tasks").mkdir(parents=True)
    write_state(live, status="RUNNING")
    os.utime(live / "run_state.json", (2e9, 2e9))  # the newest
    with RunDirectoryLock(live):
        proc = cli(*args, "resume=true", f"hydra.run.dir={tmp_path / 'resumed'}", check=True)
    assert all(e["cached"] for e in timeline(tmp_path / "resumed"))
    assert f"skipping {live}: a live run holds it" in proc.stdout + proc.stderr
