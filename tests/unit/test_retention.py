"""What a search keeps of its trials (pipeline.graph.retention): each model's best complete trials, its best
pruned one and its trial 0 keep their fold models; every other trial lets them go, in memory and in
`tasks/`, so that what a run holds does not grow with its trials."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from pipeline.graph.nodes.context import Outcome, TrialResult
from pipeline.graph.retention import TRIALS_PER_MODEL, Retention
from pipeline.graph.tasks import FoldResult
from pipeline.store import ResultStore
from tests.conftest import small


class _Metric:
    greater_is_better = True

    @staticmethod
    def loss_of(score):
        return float("inf") if score != score else -score

    def __call__(self, y, pred):
        return float(np.mean(pred))


def _fold(model, trial, fold):
    return FoldResult(task_id=f"{model}/t{trial}/f{fold}", key=f"k{model}{trial}{fold}", model=object(),
                      held_out=np.arange(3), val_pred=np.ones(3), test_pred=np.ones(2), fit_seconds=1.0,
                      predict_seconds=0.1, device="cpu", start=0.0, end=1.0, pid=1, host="h")


def _ctx(tmp_path, pruned=()):
    return SimpleNamespace(outcome=Outcome(), store=ResultStore(tmp_path), search_metric=_Metric(),
                           pruning=True,
                           trials=SimpleNamespace(pruned=set(pruned)), data=SimpleNamespace(y=np.zeros(3)))


def _score(ctx, retention, model, trial, score, pruned=False, folds=2):
    results = [_fold(model, trial, k) for k in range(folds)]
    for r in results:
        ctx.outcome.results[r.task_id] = r
        ctx.store.put(r.key, r, later=trial % 2 == 0)  # some written already, some waiting for the flush
    result = TrialResult(model, trial, {}, results, np.arange(6), np.ones(6), np.ones(2), score,
                         pruned=pruned)
    ctx.outcome.trials[(model, trial)] = result
    retention.scored(result, ctx)


def test_only_the_best_trials_trial_0_and_the_best_pruned_keep_their_models_in_memory_and_on_disk(tmp_path):
    ctx, retention = _ctx(tmp_path), Retention()
    scores = {0: 0.10, 1: 0.50, 2: 0.90, 3: 0.30, 4: 0.80, 5: 0.95, 6: 0.20, 7: 0.85}
    for trial, score in scores.items():
        _score(ctx, retention, "m", trial, score)
    _score(ctx, retention, "m", 8, 0.99, pruned=True)
    _score(ctx, retention, "m", 9, 0.98, pruned=True)
    _score(ctx, retention, "other", 1, 0.40)
    ctx.store.flush()
    kept = {t for (m, t), r in ctx.outcome.trials.items() if m == "m" and not r.released}
    assert kept == {0, 5, 2, 7, 8}  # trial 0, the three best complete, the best pruned
    assert len(kept) == TRIALS_PER_MODEL + 2 and not ctx.outcome.trials[("other", 1)].released
    for (model, trial), result in ctx.outcome.trials.items():
        files = [tmp_path / "tasks" / f"k{model}{trial}{k}.pkl" for k in range(2)]
        on_disk = [pickle.loads(f.read_bytes()) for f in files]
        in_memory = [ctx.outcome.results[f"{model}/t{trial}/f{k}"] for k in range(2)]
        if result.released:  # on disk its scores, not its model or predictions: flat in the table's rows
            assert all(f.released and f.model is None and f.test_pred is None and f.val_pred is None
                       and f.held_out is None and f.trial_score == result.score and f.fold_score == 1.0
                       for f in on_disk)
            assert all(f.model is None and f.val_pred is None for f in in_memory + result.folds)
            assert result.val_pred is None and result.score == (scores.get(trial) or result.score)
        else:
            assert all(f.model is not None for f in on_disk + in_memory + result.folds)
    assert sum(r.released for r in ctx.outcome.results.values()) == 2 * 5


def test_outcome_best_never_takes_a_released_trial():
    outcome = Outcome()
    metric = SimpleNamespace(better=lambda a, b: a > b)
    outcome.trials[("m", 0)] = TrialResult("m", 0, {}, [], None, None, None, 0.5)
    outcome.trials[("m", 1)] = TrialResult("m", 1, {}, [], None, None, None, 0.9, released=True)
    assert outcome.best("m", metric).trial == 0


@pytest.mark.parametrize("losing", [True, False])
def test_a_fit_of_a_cut_trial_and_its_folds_that_ended_let_their_models_go(tmp_path, losing):
    """A trial stopped as losing keeps its folds' scores on disk (what successive halving reads on resume);
    one the deadline cut keeps their held-out predictions (a resumed run with more time scores it whole)."""
    ctx, retention = _ctx(tmp_path, pruned=[("m", 3)] if losing else ()), Retention()
    first, later = _fold("m", 3, 0), _fold("m", 3, 1)
    ctx.outcome.results[first.task_id] = first
    ctx.store.put(first.key, first)
    bag = SimpleNamespace(level=1, model="m", trial=3, depends_on=[first.task_id, later.task_id])
    retention.dropped(bag, ctx)  # its second fold has not ended yet
    assert ctx.outcome.results[first.task_id].model is None
    ctx.outcome.results[later.task_id] = later
    ended = SimpleNamespace(kind="fit", level=1, model="m", trial=3, fold_set=None, id=later.task_id)
    retention.ended_unused(ended, ctx)
    assert ctx.outcome.results[later.task_id].model is None
    stored = pickle.loads((tmp_path / "tasks" / f"{first.key}.pkl").read_bytes())
    assert stored.model is None and stored.released and stored.trial_score is None
    if losing:
        assert stored.held_out is None and stored.val_pred is None and stored.fold_score == 1.0
    else:
        assert np.array_equal(stored.held_out, first.held_out) and stored.fold_score is None
    own = SimpleNamespace(level=1, model="m", trial=0, depends_on=["m/t0/f0"])
    ctx.outcome.results["m/t0/f0"] = _fold("m", 0, 0)
    retention.dropped(own, ctx)  # trial 0 is the floor: never released
    assert ctx.outcome.results["m/t0/f0"].model is not None


def test_a_released_fit_read_from_the_store_leaves_its_file_which_a_kept_fit_may_share(tmp_path):
    """Two trials of the same parameters share a key: the later one's fits are read from the store; letting
    them go must not empty the file the earlier, kept trial (or a resumed run) reads."""
    ctx, retention = _ctx(tmp_path), Retention()
    kept = _fold("m", 1, 0)
    ctx.store.put(kept.key, kept)
    duplicate = dataclasses.replace(kept, task_id="m/t2/f0", cached=True)
    ctx.outcome.results[duplicate.task_id] = duplicate
    retention.release_fit(duplicate.task_id, ctx)
    assert ctx.outcome.results[duplicate.task_id].released
    assert not pickle.loads((tmp_path / "tasks" / f"{kept.key}.pkl").read_bytes()).released


@pytest.mark.slow
def test_a_search_keeps_a_few_trials_models_and_a_resumed_run_reads_the_released_ones_back(cli, tmp_path):
    """Ten trials of 2-fold bags: tasks/ holds the models of at most four trials (before: every fit's);
    the run re-run in its folder reuses every stored fit, the released ones too, and serves the same board."""
    args = ["model=lightgbm", "hpo=random", "hpo.num_trials=10", "hpo.pruning=false", "parallelism=bag5",
            "parallelism.num_folds=2", "executor.in_process=always", "tracking=none", "hydra.run.dir=run",
            *small(("lightgbm",))]
    cli(*args, check=True)
    run = tmp_path / "run"
    stored = [pickle.loads(p.read_bytes()) for p in (run / "tasks").glob("*.pkl")]
    with_model = [r for r in stored if not r.released and r.model is not None]
    assert len(stored) == 10 * 2 and len(with_model) <= (TRIALS_PER_MODEL + 1) * 2, len(with_model)
    board = pd.read_csv(run / "leaderboard.csv").set_index("model")
    best = int(board.loc["lightgbm", "best_trial"])
    assert best in {int(re.search(r"/t(\d+)/", r.task_id).group(1)) for r in with_model}
    cli(*args, check=True)
    again = pd.read_csv(run / "leaderboard.csv").set_index("model")
    timeline = json.loads((run / "timeline.json").read_text())
    assert all(e["cached"] for e in timeline) and len(timeline) == 10 * 2
    assert again.loc["lightgbm", "best_trial"] == best
    scores = [c for c in board.columns if c.startswith(("val_", "test_"))]
    assert again.loc["lightgbm", scores].tolist() == pytest.approx(board.loc["lightgbm", scores].tolist())


@pytest.mark.slow
def test_a_pruned_search_keeps_its_released_fits_scores_and_a_resumed_run_prunes_the_same(cli, tmp_path):
    """With successive halving: every released fit keeps its fold's score on disk, not its predictions; the
    run re-run in its folder judges the same trials losing from those scores (no fold fitted again) and
    serves the same board."""
    args = ["model=lightgbm", "hpo=random", "hpo.num_trials=12", "hpo.pruning=true", "parallelism=bag5",
            "parallelism.num_folds=3", "executor.in_process=always", "tracking=none", "hydra.run.dir=run",
            *small(("lightgbm",))]
    cli(*args, check=True)
    run = tmp_path / "run"
    stored = [pickle.loads(p.read_bytes()) for p in (run / "tasks").glob("*.pkl")]
    released = [r for r in stored if r.released]
    assert len(released) >= 6, len(released)
    assert all(r.held_out is None and r.val_pred is None and r.fold_score is not None for r in released)
    folds = {}
    for r in stored:
        folds.setdefault(re.search(r"/t(\d+)/", r.task_id).group(1), []).append(r)
    assert any(len(f) < 3 for f in folds.values()), "no trial was stopped as losing"
    assert any(r.trial_score is not None for r in released), "no scored trial was released"
    board = pd.read_csv(run / "leaderboard.csv").set_index("model")
    cli(*args, check=True)
    again = pd.read_csv(run / "leaderboard.csv").set_index("model")
    timeline = json.loads((run / "timeline.json").read_text())
    assert all(e["cached"] for e in timeline) and len(timeline) == len(stored)
    scores = [c for c in board.columns if c.startswith(("val_", "test_"))]
    assert again.loc["lightgbm", "best_trial"] == board.loc["lightgbm", "best_trial"]
    assert again.loc["lightgbm", scores].tolist() == pytest.approx(board.loc["lightgbm", scores].tolist())
