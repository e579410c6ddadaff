"""Faults of models and tasks, through the CLI: NaN predictions, hung fits, stop signals."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import FAULT_ENV, user_config
from tests.integration.mlflow_helpers import job_runs

pytestmark = pytest.mark.slow


def run_dirs(workdir: Path):
    return sorted((workdir / "outputs" / "runs").glob("*/*"))


def test_a_model_that_predicts_nan_is_left_out_of_the_ensemble(cli, tmp_path):
    searchpath = user_config(tmp_path, "model", "broken",
                             "defaults: [lightgbm]\nbroken:\n  _target_: tests.fault_models.NanModel\n  params: {}\n")
    cli("model=broken", searchpath, "allowed_targets=[tests.]", "data=california", "data.max_rows=1000",
        "model.lightgbm.params.num_iterations=20", "tracking=none", env=FAULT_ENV, check=True)
    (run_dir,) = run_dirs(tmp_path)
    board = pd.read_csv(run_dir / "leaderboard.csv")
    assert list(board["model"])[-1] == "broken"  # NaN ranks last
    weights = json.loads(board.set_index("model").loc["ensemble", "params"])
    assert weights == {"lightgbm": 1.0, "broken": 0.0}


def test_models_that_all_predict_nan_are_one_clear_error(cli, tmp_path):
    spec = "  _target_: tests.fault_models.NanModel\n  params: {}\n"
    searchpath = user_config(tmp_path, "model", "broken", f"first:\n{spec}second:\n{spec}")
    proc = cli("model=broken", searchpath, "allowed_targets=[tests.]", "data=california", "data.max_rows=1000",
               "tracking=none", env=FAULT_ENV)
    assert proc.returncode == 1
    assert "no ensemble can be built: the validation rmse of every model is NaN or infinite (first, second)" in proc.stderr
    assert "Traceback" not in proc.stderr
