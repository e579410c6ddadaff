"""`time_limit_s` through the CLI: far more HPO trials than fit in the limit end with a leaderboard of
what finished and a summary of what the limit cut, on the terminal and in the run directory."""

from __future__ import annotations

import json

import pandas as pd


def test_a_time_limit_cuts_trials_and_still_ends_with_a_leaderboard(cli, tmp_path):
    proc = cli("data.max_rows=2000", "model=lightgbm", "model.lightgbm.params.num_iterations=30",
               "hpo=random", "hpo.num_trials=400", "parallelism.num_folds=2", "executor.in_process=always",
               "tracking=none", "time_limit_s=8", "hydra.run.dir=run", check=True, timeout=120)
    run_dir = tmp_path / "run"
    board = pd.read_csv(run_dir / "leaderboard.csv")
    assert list(board["model"]) == ["lightgbm"]
    state = json.loads((run_dir / "run_state.json").read_text())
    budget = state["time_budget"]
    assert state["status"] == "FINISHED" and budget["limit_s"] == 8.0
    assert 0 < budget["trials_not_run"] < 400 and budget["fits_not_run"] > 0
    assert "time limit: 8 s for the fits (time_limit_s)" in proc.stdout  # under the plan
    assert f"time limit 8 s: {budget['trials_not_run']} of 400 trials not run" in proc.stdout
    assert budget["fits_ended_s"] < 8.0 + 10  # the last fit ended within the limit and its stop grace
    finished = 400 - budget["trials_not_run"] - budget["trials_dropped"]
    assert finished >= 1 and len(json.loads((run_dir / "timeline.json").read_text())) >= 2 * finished
