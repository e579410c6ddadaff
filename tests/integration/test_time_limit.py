"""`time_limit_s` (the whole run) and `fit_time_limit_s` (the fits) through the CLI: far more HPO trials
than fit in the limit end with a leaderboard of what finished and a summary of what the limit cut, on
the terminal and in the run directory."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pandas as pd
import pytest

from pipeline.graph.tail import RECORD
from pipeline.graph.time_budget import run_grace_s

pytestmark = pytest.mark.wall_clock  # each run is judged by what its budget did

REAL = Path(__file__).resolve().parents[1] / "data" / "real"


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
               "tracking=none", "time_limit_s=15", "hydra.run.dir=run", check=True, timeout=120)
    wall = time.monotonic() - began
    budget = json.loads((tmp_path / "run" / "run_state.json").read_text())["time_budget"]
    assert budget["key"] == "time_limit_s" and 0 < budget["reserved_s"] < 15
    assert budget["fits_ended_s"] <= 15 - budget["reserved_s"] + 1  # the fits left the tail its time
    assert "time limit: 15 s for the whole run (time_limit_s)" in proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("time_limit_s=15 s: the run took ") and last.endswith("within the limit"), last
    assert wall <= 15 + 1.5, f"the process took {wall:.1f} s"


def test_a_tuned_default_model_keeps_the_kinds_hpo_auto_adds(cli, tmp_path):
    """Through the CLI: a parameter of a default model set on the command line tunes that model and does not
    choose the models, so on a regression table small for the budget the kinds hpo=auto adds still join
    (before, any key under `model` kept them out, unsaid); `~model.nn` chooses the models and adds none."""
    table = ("data=synthetic", "data.classes=0", "data.rows=3000", "time_limit_s=60", "dry_run=true")
    proc = cli(*table, "model.nn.params.max_epochs=500", "hydra.run.dir=tuned", check=True, timeout=120)
    plan = json.loads((tmp_path / "tuned" / "plan.json").read_text())
    names = [m["name"] for m in plan["models"]]
    assert names == ["lightgbm", "xgboost", "nn", "extra_trees", "catboost", "linear"]
    assert "join the models, since the table is small for the budget" in " ".join(proc.stdout.split())
    cli(*table, "~model.nn", "hydra.run.dir=removed", check=True, timeout=120)
    plan = json.loads((tmp_path / "removed" / "plan.json").read_text())
    assert [m["name"] for m in plan["models"]] == ["lightgbm", "xgboost"]


def test_under_stacking_the_kinds_hpo_auto_would_add_are_named_and_left_to_the_user(cli, tmp_path):
    """Through the CLI: with stack_levels=1 hpo=auto adds no kinds; the run names those it would have added
    and how to add them (before, they were left out unsaid), and that command line adds them."""
    table = ("data=synthetic", "data.classes=0", "data.rows=3000", "time_limit_s=60", "dry_run=true",
             "stack_levels=1")
    proc = cli(*table, "hydra.run.dir=stacked", check=True, timeout=120)
    plan = json.loads((tmp_path / "stacked" / "plan.json").read_text())
    assert [m["name"] for m in plan["models"]] == ["lightgbm", "xgboost", "nn"]
    said = " ".join(proc.stdout.split())
    models = "lightgbm,xgboost,nn,extra_trees,catboost,linear"
    assert ("with stack_levels=1: extra_trees, catboost and linear, which join the models on a table this "
            f"small without stacking, do not here (model=[{models}] adds them)") in said
    cli(*table, f"model=[{models}]", "hydra.run.dir=added", check=True, timeout=120)
    plan = json.loads((tmp_path / "added" / "plan.json").read_text())
    assert [m["name"] for m in plan["models"]] == models.split(",")


def test_a_users_experiment_config_chooses_the_models_and_refit_as_the_command_line_does(cli, tmp_path):
    """Through the CLI: `+experiment=NAME` from the user's own configs, choosing `model: gbm` and
    `refit: false`, is the user's word, as the same keys typed would be: no added kinds, no refits (before,
    the engine read only the command line's keys, added its kinds and turned refit on)."""
    from tests.conftest import user_config

    searchpath = user_config(tmp_path, "experiment", "gbm_only",
                             "# @package _global_\ndefaults:\n  - override /model: gbm\nrefit: false\n")
    proc = cli("data=synthetic", "data.classes=0", "data.rows=3000", "time_limit_s=60", "dry_run=true",
               searchpath, "+experiment=gbm_only", "hydra.run.dir=mine", check=True, timeout=120)
    plan = json.loads((tmp_path / "mine" / "plan.json").read_text())
    assert [m["name"] for m in plan["models"]] == ["lightgbm", "xgboost"]
    assert not [t for t in plan["tasks"] if "refit" in t["id"]]
    said = " ".join(proc.stdout.split())
    assert "join the models" not in said and "refit=true" not in said and "for the refits" not in said


def test_each_job_of_a_sweep_has_the_whole_limit_and_spends_it_with_hpo_auto(cli, tmp_path):
    """Each job's clock starts with the job (the first with its process); no hpo chosen: hpo=auto,
    its first trials each model's own params then its portfolio; a table this small for the budget:
    5-fold bags, the losing trials stopped after their first folds. The tail's reserve is learnt: the first
    job reserves from the bound's own CPU share and records the tail it took, and the next like it reserves
    from that measure (other kinds of run keep their own: tests/unit/test_time_budget.py).
    """
    env = {"PIPELINE_CACHE_DIR": str(tmp_path / "cache")}  # no tails measured before this sweep
    proc = cli("-m", "seed=0,1", "model=lightgbm", "data.max_rows=1000",
               "executor.in_process=always", "tracking=none", "time_limit_s=15",
               "model.lightgbm.params.num_iterations=20", "hydra.sweep.dir=sweep", env=env, check=True,
               timeout=240)
    assert proc.stdout.count("hpo=auto: time_limit_s=15 is set and no hpo was chosen") == 2
    assert proc.stdout.count("each trial is a 5-fold bag") == 2
    # within the limit, or past it by less than the stop grace: the second job's tail reserve is learnt from
    # the first job's tail, which ran under another load (here, the rest of the suite's)
    line = r"time_limit_s=15 s: the run took ([0-9.]+) s from start-up"
    took = [float(x) for x in re.findall(line, proc.stdout)]
    assert len(took) == 2 and max(took) < 15 + run_grace_s(15), took
    for job in ("0", "1"):
        state = json.loads((tmp_path / "sweep" / job / "run_state.json").read_text())
        assert state["time_budget"]["key"] == "time_limit_s" and state["time_budget"]["fits_ended_s"] < 15
        assert state["time_budget"]["trials_pruned"] > 0
        asked = json.loads((tmp_path / "sweep" / job / "trials" / "lightgbm.json").read_text())
        assert len(asked) >= 2  # searched: the model's own params, then more
    logged = proc.stdout + proc.stderr
    assert logged.count("no tail of such a run measured on this machine yet") == 1  # the first job's
    assert logged.count("from the tails of the last 1 such runs on this machine") == 1  # the second job's
    shares = list((tmp_path / "cache" / "tail").iterdir())
    assert [len(json.loads(p.read_text())[RECORD]) for p in shares] == [2]
    assert [p.name.split("-")[-2] for p in shares] == ["untracked"]
    assert all(p.stat().st_mode & 0o077 == 0 for p in shares)  # this user's alone


def test_a_slow_models_first_fit_does_not_spend_every_other_models_first_trial(cli, tmp_path):
    """Fits one at a time, LightGBM first and made slow (200,000 rounds at a tiny learning rate, no early
    stopping): its first fit stops at its share of the time left, so XGBoost's and the network's first
    trials end too and each model has a row; before, LightGBM's fit ran to the deadline and the others
    were left out. The fits' budget (`fit_time_limit_s`, from the first fit) rather than the whole run's:
    the driver's start-up (the three libraries imported in-process) took 16 s of a 20-s `time_limit_s`
    beside a test running eight engines at once, leaving the first fits no time to share."""
    proc = cli("data.max_rows=2000", "model=all", "parallelism.sequential=true", "executor.in_process=always",
               "model.lightgbm.params.num_iterations=200000", "model.lightgbm.params.early_stopping_round=0",
               "model.lightgbm.params.learning_rate=0.0001", "tracking=none", "fit_time_limit_s=10",
               "hydra.run.dir=run", check=True, timeout=120)
    board = pd.read_csv(tmp_path / "run" / "leaderboard.csv")
    assert {"lightgbm", "xgboost", "nn"} <= set(board["model"]), proc.stdout[-2000:]
    budget = json.loads((tmp_path / "run" / "run_state.json").read_text())["time_budget"]
    assert budget["left_out"] == [] and budget["fits_held_to_share"] >= 1
    timeline = json.loads((tmp_path / "run" / "timeline.json").read_text())
    first = next(e for e in timeline if e["model"] == "lightgbm" and e["trial"] == 0)
    assert first["stopped_by_budget"] and first["end"] - first["start"] < 10
    assert "first-trial fits at their share of the time, so that every model's first trial could end" in proc.stdout


def test_a_slow_models_bag_is_kept_with_the_folds_that_ended_and_the_ensemble_scores_their_rows(cli, tmp_path):
    """The same slow LightGBM in 5-fold bags: its lead fold runs first and stops at its share among the three
    models' leads; its other folds start only while the time left gives each at least half of that, and its
    first trial is kept with the folds that ended (said on the terminal and in run_state.json); the ensemble's
    weights are chosen on the rows every model predicted. Before, all five of its folds ran, each stopped at
    a fifth of the lead's share. hpo=none: one trial of each model's own params, so no kind is withdrawn for
    losing (graph.withdrawal, hpo=auto's: the next test)."""
    proc = cli("data.max_rows=2000", "model=all", "parallelism.sequential=true", "parallelism.num_folds=5",
               "hpo=none", "executor.in_process=always", "model.lightgbm.params.num_iterations=200000",
               "model.lightgbm.params.early_stopping_round=0", "model.lightgbm.params.learning_rate=0.0001",
               "tracking=none", "time_limit_s=20", "hydra.run.dir=run", check=True, timeout=120)
    board = pd.read_csv(tmp_path / "run" / "leaderboard.csv").set_index("model")
    assert {"lightgbm", "xgboost", "nn", "ensemble"} <= set(board.index), proc.stdout[-2000:]
    kept = board.loc["lightgbm", "num_folds"]
    assert kept < 5 and board.loc["ensemble", "num_folds"] <= kept
    budget = json.loads((tmp_path / "run" / "run_state.json").read_text())["time_budget"]
    assert f"lightgbm: {kept} of 5 folds" in budget["first_trials_partial"] and budget["left_out"] == []
    assert "first trials kept with the folds that ended in time" in " ".join(proc.stdout.split())
    timeline = json.loads((tmp_path / "run" / "timeline.json").read_text())
    lightgbm = [e for e in timeline if e["model"] == "lightgbm" and e["trial"] == 0]
    assert len(lightgbm) == kept and lightgbm[0]["fold"] == 0 and lightgbm[0]["stopped_by_budget"]


def test_under_hpo_auto_a_dear_kind_that_loses_and_adds_nothing_is_withdrawn_after_its_first_fold(cli,
                                                                                                  tmp_path):
    """5-fold bags, 20 s, a network that learns nothing (learning rate 1e-9) and trains on (patience past its
    epochs): its first fold loses to the GBMs', a blend with them gives it no weight and its other folds
    would take the time left, so it is withdrawn, its folds and trials not started, and the run says so."""
    proc = cli("data.max_rows=2000", "model=all", "parallelism.num_folds=5", "executor.in_process=always",
               "model.nn.params.learning_rate=1e-9", "model.nn.params.patience=1000",
               "model.nn.params.max_epochs=100", "tracking=none", "time_limit_s=20", "hydra.run.dir=run",
               check=True, timeout=120)
    out = " ".join(proc.stdout.split())
    budget = json.loads((tmp_path / "run" / "run_state.json").read_text())["time_budget"]
    withdrawn = {w.split(" ")[0]: w for w in budget["withdrawn"]}
    assert "nn" in withdrawn, out[-2000:]
    assert "nn withdrawn after its first fold: roc_auc" in out and "which the other models use" in out
    # a cheap GBM that loses and adds nothing is withdrawn only where the fits' time is nearly out (on a
    # loaded box its lead fold may end late): while time is plenty its few seconds of folds are not dear
    for kind, line in withdrawn.items():
        if kind != "nn":
            time_left = float(re.search(r"of the ([0-9.]+) s left", line).group(1))
            assert time_left < 0.25 * 20, line
    board = pd.read_csv(tmp_path / "run" / "leaderboard.csv")
    kept = {"lightgbm", "xgboost"} - withdrawn.keys()
    assert "nn" not in set(board["model"]) and kept and kept <= set(board["model"]), out[-2000:]
    assert ("ensemble" in set(board["model"])) == (len(kept) > 1)
    timeline = json.loads((tmp_path / "run" / "timeline.json").read_text())
    # the withdrawn kind's trial counts as withdrawn, not as dropped: a trial dropped unfinished can only be
    # a later trial of another kind that a loaded machine's slower fits left short of the deadline
    later = {(e["model"], e["trial"]) for e in timeline if e["trial"] > 0 and e["model"] != "nn"}
    assert budget["left_out"] == [] and budget["trials_dropped"] <= len(later), (budget["line"], later)
    assert [e["fold"] for e in timeline if e["model"] == "nn"] == [0]
    leads = [e["start"] for e in timeline if e["trial"] == 0 and e["fold"] == 0]
    assert max(leads) <= min(e["start"] for e in timeline if e["trial"] == 0 and e["fold"] > 0)  # leads first


def test_refits_run_under_a_time_limit_in_the_time_kept_for_them(cli, tmp_path):
    """refit=true with time_limit_s: the trials the budget cut do not cut the refits (each model's best trial
    that ended is fitted once more on every row), which run after the fits' deadline in the time the tail
    keeps for them. Before, any cut trial cut its model's refit, and the refit node never ran under a limit."""
    proc = cli("data.max_rows=2000", "model=lightgbm", "refit=true", "tracking=none", "time_limit_s=15",
               "hydra.run.dir=run", check=True, timeout=120)
    board = pd.read_csv(tmp_path / "run" / "leaderboard.csv")
    assert "lightgbm_refit" in set(board["model"]), proc.stdout[-1500:]
    budget = json.loads((tmp_path / "run" / "run_state.json").read_text())["time_budget"]
    assert budget["trials_not_run"] > 0 and "refit" not in budget["other_cut"] and "within the limit" in proc.stdout


def test_stacking_under_a_time_limit_fits_its_level_after_a_search_that_leaves_it_time(cli, tmp_path):
    """stack_levels=1 with time_limit_s: the level-1 search ends early enough for the stacked fits, and the
    trials it cut do not cut them. Before, level 2 was left out of every such run. 20 s: at 15 s, beside the
    suite's other worker, a run once left level 2 unfinished (its reserve measured before a burst of load)."""
    proc = cli("data.max_rows=2000", "model=lightgbm", "stack_levels=1", "tracking=none", "time_limit_s=20",
               "hydra.run.dir=run", check=True, timeout=120)
    board = pd.read_csv(tmp_path / "run" / "leaderboard.csv")
    assert "lightgbm_l2" in set(board["model"]), proc.stdout[-1500:]
    budget = json.loads((tmp_path / "run" / "run_state.json").read_text())["time_budget"]
    assert budget["trials_not_run"] > 0 and budget["left_out"] == [] and budget["stacked_s"] > 0
    assert "for the stacked levels" in " ".join(proc.stdout.split())


def test_hpo_auto_on_a_number_to_predict_answers_with_the_blend_of_its_bags_and_refits(cli, tmp_path):
    """A small regression table under hpo=auto: the bags' trials, each model's best refitted on every row,
    and the run answers with the mean of the bagged ensemble's and the refits' ensemble's predictions: the
    leaderboard's first row, the run directory's best predictor, what `pipeline.predict` serves."""
    import shutil
    import subprocess
    import sys

    import numpy as np

    from pipeline.predictor_source import load_predictor

    shutil.copy(REAL / "Auto.csv", tmp_path / "Auto.csv")
    proc = cli("data.path=Auto.csv", "data.label=mpg", "model=gbm", "tracking=none", "time_limit_s=20",
               "hydra.run.dir=run", check=True, timeout=120)
    said = " ".join(proc.stdout.split())
    assert "best trial is fitted once more on every training row (refit=true)" in said
    run = tmp_path / "run"
    board = pd.read_csv(run / "leaderboard.csv")
    assert board["model"][0] == "ensemble_blend" and {"ensemble", "ensemble_refit"} <= set(board["model"])
    assert np.isnan(board["val_rmse"][0]) and "which it blends with the refits" in said
    assert (run / "predictors" / "BEST").read_text() == "ensemble_blend"
    out = subprocess.run([sys.executable, "-m", "pipeline.predict", "source=run", "data.path=Auto.csv",
                          "output=pred.csv"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    served = pd.read_csv(tmp_path / "pred.csv").iloc[:, -1].to_numpy()
    rows = pd.read_csv(tmp_path / "Auto.csv").drop(columns="mpg")
    both = [load_predictor("run", name, None, tmp_path).predict(rows)
            for name in ("ensemble", "ensemble_refit")]
    assert np.allclose(served, (both[0] + both[1]) / 2, rtol=1e-5)
    assert not np.allclose(both[0], both[1])  # two answers, averaged
    took = float(re.findall(r"time_limit_s=20 s: the run took ([0-9.]+) s", proc.stdout)[0])
    assert took < 20 + run_grace_s(20)


def test_a_key_under_hpo_tunes_hpo_auto_through_the_cli(cli, tmp_path):
    """`time_limit_s=30 hpo.pruning=false` searches with hpo=auto, without pruning, as a key under a model
    tunes that model (before, any key under `hpo` kept hpo=none: each model's own params once, unsaid)."""
    proc = cli("time_limit_s=30", "hpo.pruning=false", "hpo.num_trials=40", "dry_run=true", "tracking=none",
               "hydra.run.dir=tuned", check=True, timeout=120)
    said = " ".join(proc.stdout.split())
    assert "hpo=auto: time_limit_s=30 is set and no hpo was chosen" in said
    assert "then a TPE search, for as many trials" in said  # no "with pruning"
    assert "hpo.num_trials=40 as set, hpo.pruning=false as set" in said
    plan = json.loads((tmp_path / "tuned" / "plan.json").read_text())
    assert {m["name"]: m["num_trials"] for m in plan["models"]} == {"lightgbm": 40, "xgboost": 40, "nn": 40}
    refused = cli("time_limit_s=30", "hpo.start_from_defaults=false", "dry_run=true", "tracking=none",
                  "hydra.run.dir=refused", timeout=120)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "hpo.start_from_defaults=false: under time_limit_s with no hpo chosen" in refused.stdout + refused.stderr
