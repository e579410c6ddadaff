"""In-run HPO: Optuna samplers over the models' YAML search spaces, trials as graph nodes."""

import itertools
import json
from pathlib import Path

import pandas as pd
import pytest

from pipeline.errors import ConfigError
from pipeline.config import HpoConf, SearchDimConf
from pipeline.hpo import TrialSource
from tests.conftest import user_config
from tests.integration.mlflow_helpers import runs

SPACE = {
    "learning_rate": SearchDimConf("float", 0.01, 0.2, log=True),
    "num_leaves": SearchDimConf("int", 15, 255, log=True),
    "boosting": SearchDimConf("categorical", choices=("gbdt", "dart")),
}


def hpo(searcher: str, num_trials: int, **values) -> HpoConf:
    """The hpo settings of conf/hpo/<searcher>.yaml: its class named by `_target_`."""
    return HpoConf(num_trials=num_trials, _target_=f"pipeline.searchers.{searcher}", **values)


def run_dirs(workdir: Path):
    return sorted((workdir / "outputs" / "runs").glob("*/*"))


class TestTrialSource:
    def test_random_samples_inside_the_space_and_starts_from_the_defaults(self):
        source = TrialSource(hpo("RandomSearch", 6, seed=1), {"m": SPACE}, {"m": {"learning_rate": 0.05, "num_leaves": 63}},
                             "maximize")
        first = source.params("m", 0)
        assert first["learning_rate"] == 0.05 and first["num_leaves"] == 63
        for t in range(1, 6):
            p = source.params("m", t)
            assert 0.01 <= p["learning_rate"] <= 0.2 and 15 <= p["num_leaves"] <= 255
            assert p["boosting"] in ("gbdt", "dart")
            source.tell("m", t, 0.5 + t / 100)
        assert source.params("m", 3) is source.params("m", 3)  # asked once

    def test_same_seed_same_trials(self):
        def sample(seed):
            s = TrialSource(hpo("TpeSearch", 4, seed=seed), {"m": SPACE}, {}, "maximize")
            return [s.params("m", t) for t in range(4)]

        assert sample(7) == sample(7)
        assert sample(7) != sample(8)

    def test_grid_covers_a_finite_space(self):
        space = {"a": SearchDimConf("categorical", choices=(1, 2)), "b": SearchDimConf("int", 0, 4, step=2)}
        source = TrialSource(hpo("GridSearch", 6, seed=0, start_from_defaults=False), {"m": space}, {}, "minimize")
        seen = set()
        for t in range(6):
            p = source.params("m", t)
            seen.add((p["a"], p["b"]))
            source.tell("m", t, float(t))
        assert seen == set(itertools.product((1, 2), (0, 2, 4)))

    def test_grid_points_of_a_continuous_range(self):
        assert SearchDimConf("float", 0.01, 1.0, log=True).grid(3) == pytest.approx([0.01, 0.1, 1.0])
        assert SearchDimConf("int", 16, 64).grid(3) == [16, 40, 64]

    def test_trials_are_saved_and_reused_on_resume(self, tmp_path):
        a = TrialSource(hpo("RandomSearch", 3, seed=0), {"m": SPACE}, {}, "maximize", store_dir=tmp_path)
        asked = [a.params("m", t) for t in range(3)]
        b = TrialSource(hpo("RandomSearch", 3, seed=99), {"m": SPACE}, {}, "maximize", store_dir=tmp_path)
        assert [b.params("m", t) for t in range(3)] == asked

    @pytest.mark.parametrize(
        "dim, message",
        [
            (SearchDimConf("flaot", 0, 1), "type='flaot' is not one of float, int, categorical"),
            (SearchDimConf("float", 1, 1), "low=1 must be below high=1"),
            (SearchDimConf("float", 0, 1, log=True), "a log scale needs low > 0"),
            (SearchDimConf("int", None, 3), "needs low and high"),
            (SearchDimConf("categorical"), "needs a non-empty choices list"),
        ],
    )
    def test_bad_search_space(self, dim, message):
        with pytest.raises(ConfigError, match=message):
            hpo("RandomSearch", 2).check({"m": {"x": dim}})

    def test_searcher_without_a_space(self):
        with pytest.raises(ConfigError, match="model.m.search_space is empty"):
            hpo("TpeSearch", 2).check({"m": {}})


@pytest.mark.slow
def test_random_search_logs_a_child_run_per_trial(cli, tmp_path):
    cli("model=lightgbm", "hpo=random", "hpo.num_trials=4", "parallelism.fit.num_cpus=1", "data.max_rows=2000",
        "model.lightgbm.params.num_iterations=80", check=True)
    client, all_runs = runs(tmp_path)
    (job,) = [r for r in all_runs if "pipeline.run_dir" in r.data.tags]
    trials = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == job.info.run_id]
    assert len(trials) == 4
    for trial in trials:
        assert trial.info.status == "FINISHED"
        lr = float(trial.data.params["learning_rate"])
        assert 0.01 <= lr <= 0.2
        assert 0.5 < trial.data.metrics["val_roc_auc"] <= 1.0
    best_trial = max(trials, key=lambda r: r.data.metrics["val_roc_auc"])
    assert job.data.metrics["lightgbm/val_roc_auc"] == pytest.approx(best_trial.data.metrics["val_roc_auc"])
    (run_dir,) = run_dirs(tmp_path)
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["models"][0]["trials_parallel"] == 2  # 2 CPUs, 1 per fit: two trials at once
    timeline = json.loads((run_dir / "timeline.json").read_text())
    first, second = sorted(timeline, key=lambda e: e["start"])[:2]
    assert first["trial"] != second["trial"] and second["start"] < first["end"]  # trials overlapped


def test_under_accuracy_trials_are_searched_and_ranked_by_their_log_loss(cli, tmp_path):
    """Accuracy reads only each row's likeliest class: on penguins' species most trials score the same, and
    the first of them would be the model's best. Each trial is told to the searcher and ranked by its held-out
    rows' log loss (`metrics.choice_metric`), said once; its MLflow run keeps both scores, and the model's
    leaderboard row is its trial of least log loss."""
    from tests.conftest import ROOT

    proc = cli(f"data.path={ROOT / 'tests' / 'data' / 'real' / 'penguins-raw.csv'}", "data.label=Species",
               "model=lightgbm", "hpo=random", "hpo.num_trials=4", "parallelism.fit.num_cpus=1",
               "model.lightgbm.params.num_iterations=30", check=True)
    said = proc.stdout + proc.stderr
    assert said.count("hpo: trials scored, searched and ranked by the held-out rows' log_loss, not their "
                      "accuracy") == 1
    client, all_runs = runs(tmp_path)
    (job,) = [r for r in all_runs if "pipeline.run_dir" in r.data.tags]
    trials = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == job.info.run_id]
    assert len(trials) == 4
    for trial in trials:
        assert 0 <= trial.data.metrics["val_log_loss"] and 0 <= trial.data.metrics["val_accuracy"] <= 1
    whole = [t for t in trials if t.data.tags.get("pipeline.pruned") != "True"]
    best = min(whole, key=lambda r: r.data.metrics["val_log_loss"])
    assert job.data.metrics["lightgbm/val_log_loss"] == pytest.approx(best.data.metrics["val_log_loss"])
    assert job.data.metrics["lightgbm/val_accuracy"] == pytest.approx(best.data.metrics["val_accuracy"])


@pytest.mark.slow
def test_tpe_over_a_bagged_network_and_gbm(cli, tmp_path):
    """Each trial is a bagged model (trials x folds), the best trial per model goes to the ensemble."""
    cli("model=all", "hpo=tpe", "hpo.num_trials=3", "parallelism.num_folds=2", "parallelism.fit.num_cpus=1",
        "data.max_rows=1500", "model.nn.params.max_epochs=2", "model.lightgbm.params.num_iterations=40",
        "model.xgboost.params.num_boost_round=40", "tracking=none", check=True)
    (run_dir,) = run_dirs(tmp_path)
    timeline = json.loads((run_dir / "timeline.json").read_text())
    assert len(timeline) == 3 * 3 * 2  # models x trials x folds
    board = (run_dir / "leaderboard.csv").read_text()
    assert "ensemble" in board
    for model in ("lightgbm", "xgboost", "nn"):
        assert len(json.loads((run_dir / "trials" / f"{model}.json").read_text())) == 3


@pytest.mark.slow
def test_pruning_stops_bad_trials(cli, tmp_path):
    searchpath = user_config(
        tmp_path, "model", "wide",
        "defaults: [lightgbm]\nlightgbm:\n  search_space:\n"
        "    learning_rate: {type: float, low: 0.0005, high: 0.3, log: true}\n",
    )
    cli("model=wide", searchpath, "hpo=random", "hpo.num_trials=10", "hpo.pruning=true", "parallelism.fit.num_cpus=1",
        "data.max_rows=3000", "tracking=none", check=True)
    (run_dir,) = run_dirs(tmp_path)
    timeline = json.loads((run_dir / "timeline.json").read_text())
    pruned = {e["trial"] for e in timeline if e["pruned"]}
    assert pruned, "no trial was pruned"
    board = pd.read_csv(run_dir / "leaderboard.csv").set_index("model")
    assert int(board.loc["lightgbm", "best_trial"]) not in pruned


def test_a_users_own_searcher_by_target(cli, tmp_path):
    """hpo._target_ names a Searcher class from the user's module; hpo.options are its keywords."""
    cli("model=lightgbm", "hpo._target_=tests.user_sources.Listed",
        "+hpo.options.values={learning_rate: [0.0123, 0.0456]}", "hpo.num_trials=2",
        "hpo.start_from_defaults=false", "allowed_targets=[tests.]", "data.max_rows=1000",
        "model.lightgbm.params.num_iterations=20", "tracking=none", check=True)
    (run_dir,) = sorted((tmp_path / "outputs" / "runs").glob("*/*"))
    trials = json.loads((run_dir / "trials" / "lightgbm.json").read_text())
    assert sorted(t["learning_rate"] for t in trials.values()) == [0.0123, 0.0456]
    assert {t["num_leaves"] for t in trials.values()} == {4}  # the searcher's own rule: the space's low end


def test_a_searcher_target_outside_allowed_targets_is_refused(cli, tmp_path):
    proc = cli("model=lightgbm", "hpo._target_=tests.user_sources.Listed",
               "dry_run=true", "tracking=none")
    assert proc.returncode == 2
    assert "hpo._target_='tests.user_sources.Listed' is outside the allowed modules" in proc.stderr
    assert "Traceback" not in proc.stderr
