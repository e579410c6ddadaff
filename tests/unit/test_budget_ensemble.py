"""A searched run's ensemble picks from each model's best trials and its trial 0 (the model's own params,
the default run's members), not the best trial alone; the picks are in its predictor, not on the board."""

from __future__ import annotations

import json
import pickle

import pandas as pd

from tests.conftest import small


def test_the_ensemble_may_pick_each_models_runners_up_and_its_own_params(cli, tmp_path):
    cli("hpo=random", "hpo.num_trials=4", "executor.in_process=always", "tracking=none", *small(), check=True)
    (run_dir,) = sorted((tmp_path / "outputs" / "runs").glob("*/*"))
    board = pd.read_csv(run_dir / "leaderboard.csv").set_index("model")
    weights = json.loads(board.loc["ensemble", "params"])
    for model in ("lightgbm", "xgboost", "nn"):
        assert model in weights
        if int(board.loc[model, "best_trial"]) != 0:
            assert f"{model} trial 0" in weights, weights
    assert set(board.index) == {"ensemble", "lightgbm", "xgboost", "nn"}  # no row of their own
    assert sorted(p.stem for p in (run_dir / "predictors").glob("*.pkl")) == ["ensemble", "lightgbm", "nn",
                                                                             "xgboost"]
    with open(run_dir / "predictors" / "ensemble.pkl", "rb") as f:
        ensemble = pickle.load(f)
    picked = {m.name for m, w in zip(ensemble.members, ensemble.weights)}
    assert picked == {n for n, w in weights.items() if w > 0}  # what it blends, no member at weight 0
    assert all(w > 0 for w in ensemble.weights)
