"""Early-stopped trials: successive halving over folds. A trial whose first folds rank outside the best
third of the trials that got as far does not start its later folds, and is told to Optuna as pruned;
the model's own params (trial 0) are never stopped."""

from __future__ import annotations

import json
from collections import Counter

import optuna
import pandas as pd

from pipeline.config import HpoConf, SearchDimConf
from pipeline.hpo import TrialSource
from tests.conftest import small


def _source(pruning=True) -> TrialSource:
    spec = HpoConf(num_trials=20, seed=0, pruning=pruning, start_from_defaults=True,
                   _target_="pipeline.searchers.RandomSearch")
    return TrialSource(spec, {"m": {"x": SearchDimConf("float", 0.0, 1.0)}}, {"m": {"x": 0.5}}, "maximize")


def test_a_trial_losing_on_its_first_fold_stops_and_is_told_pruned_the_models_own_params_never():
    source = _source()
    for trial in range(3):
        source.params("m", trial)
    assert not source.fold_scored("m", 0, 0.60)  # trial 0: the floor, whatever it scores
    assert not source.fold_scored("m", 1, 0.90)  # the best so far at one fold goes on
    assert source.fold_scored("m", 2, 0.70)  # not in the best third of three: stopped
    source.drop("m", 2)  # its bag, cut when its later folds were: still pruned, not failed
    states = {t.number: t.state for t in source._study("m").trials}
    assert states[2] == optuna.trial.TrialState.PRUNED and source.pruned == {("m", 2)}
    assert not source.fold_scored("m", 2, 0.99)  # told once


def test_a_fold_its_round_pruner_stopped_stops_the_trial_and_without_pruning_nothing_stops():
    source = _source()
    source.params("m", 0), source.params("m", 1)
    assert source.fold_scored("m", 1, 0.99, pruned=True)
    off = _source(pruning=False)
    off.params("m", 0), off.params("m", 1), off.params("m", 2)
    assert not any(off.fold_scored("m", t, s) for t, s in ((0, 0.9), (1, 0.1), (2, 0.1)))


def test_losing_trials_do_not_start_their_later_folds_and_the_best_trial_has_every_fold(cli, tmp_path):
    """Fits in the driver one at a time: a stopped trial fitted the folds of a rung (1 or 3) and no more
    (before, every trial fitted all five)."""
    cli("model=lightgbm", "hpo=random", "hpo.num_trials=8", "hpo.pruning=true", "parallelism=bag5",
        "executor.in_process=always", "tracking=none", *small(("lightgbm",)), check=True)
    (run_dir,) = sorted((tmp_path / "outputs" / "runs").glob("*/*"))
    fits = Counter(e["trial"] for e in json.loads((run_dir / "timeline.json").read_text()))
    assert fits[0] == 5 and sorted(fits) == list(range(8))
    stopped = [t for t, n in fits.items() if n < 5]
    assert stopped and all(fits[t] in (1, 3) for t in stopped) and 1 in (fits[t] for t in stopped), fits
    board = pd.read_csv(run_dir / "leaderboard.csv").set_index("model")
    assert fits[int(board.loc["lightgbm", "best_trial"])] == 5
