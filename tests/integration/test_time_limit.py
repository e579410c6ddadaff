"""`time_limit_s` (the whole run) and `fit_time_limit_s` (the fits) through the CLI: far more HPO trials
than fit in the limit end with a leaderboard of what finished and a summary of what the limit cut, on
the terminal and in the run directory."""

from __future__ import annotations

import json
import time

import pandas as pd


def test_a_fit_time_limit_cuts_trials_and_still_ends_with_a_leaderboard(cli, tmp_path):
    proc = cli("data.max_rows=2000", "model=lightgbm", "model.lightgbm.params.num_iterations=30",
               "hpo=random", "hpo.num_trials=400", "parallelism.num_folds=2", "executor.in_process=always",
               "tracking=none", "fit_time_limit_s=8", "hydra.run.dir=run", check=True, timeout=120)
    run_dir = tmp_path / "run"
    board = pd.read_csv(run_dir / "leaderboard.csv")
    assert list(board["model"]) == ["lightgbm"]
    state = json.loads((run_dir / "run_state.json").read_text())
    budget = state["time_budget"]
    assert state["status"] == "FINISHED" and budget["limit_s"] == 8.0
    assert 0 < budget["trials_not_run"] < 400 and budget["fits_not_run"] > 0
    assert "time limit: 8 s for the fits (fit_time_limit_s)" in proc.stdout  # under the plan
    assert f"fit_time_limit_s=8 s: {budget['trials_not_run']} of 400 trials not run" in proc.stdout
    assert budget["fits_ended_s"] < 8.0 + 10  # the last fit ended within the limit and its stop grace
    finished = 400 - budget["trials_not_run"] - budget["trials_dropped"]
    assert finished >= 1 and len(json.loads((run_dir / "timeline.json").read_text())) >= 2 * finished


def test_a_time_limit_bounds_the_whole_run_from_start_up_to_the_last_line(cli, tmp_path):
    """The process ends within time_limit_s and a little more (the interpreter's exit): start-up, the
    fits and the tail after them (ensemble, test scores, saving) all spend the limit."""
    began = time.monotonic()
    proc = cli("data.max_rows=2000", "model=lightgbm", "model.lightgbm.params.num_iterations=30",
               "hpo=random", "hpo.num_trials=400", "parallelism.num_folds=2", "executor.in_process=always",
               "tracking=none", "time_limit_s=12", "hydra.run.dir=run", check=True, timeout=120)
    wall = time.monotonic() - began
    budget = json.loads((tmp_path / "run" / "run_state.json").read_text())["time_budget"]
    assert budget["key"] == "time_limit_s" and 0 < budget["reserved_s"] < 12
    assert budget["fits_ended_s"] <= 12 - budget["reserved_s"] + 1  # the fits left the tail its time
    assert "time limit: 12 s for the whole run (time_limit_s)" in proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("time_limit_s=12 s: the run took ") and last.endswith("within the limit"), last
    assert wall <= 12 + 1.5, f"the process took {wall:.1f} s"
