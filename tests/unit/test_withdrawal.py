"""Withdrawing a kind after its first fold (pipeline.graph.withdrawal): the three rules on one fold's rows."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from pipeline.graph.plan import DRIVER, Task, fit_id
from pipeline.graph.withdrawal import rivals, withdrawal
from pipeline.metrics import METRICS, choice_metric

ROWS = 4000


def _fold(model: str, proba: np.ndarray, seconds: float = 5.0, fold: int = 0):
    held_out = np.arange(fold, ROWS, 5)
    return SimpleNamespace(held_out=held_out, val_pred=np.column_stack([1 - proba, proba]), start=0.0,
                           end=seconds)


def _ctx(y, results: dict, folds: int = 5):
    plan = SimpleNamespace(allocation=lambda model: SimpleNamespace(num_folds=folds))
    return SimpleNamespace(plan=plan, metric=METRICS["roc_auc"], search_metric=METRICS["roc_auc"],
                           data=SimpleNamespace(y=y), outcome=SimpleNamespace(results=results))


def _case(ours: str, seconds: float = 5.0):
    """A leader whose scores are the label plus noise; ours: the same noise and more of its own (it adds
    nothing), or noise of its own (weaker alone, but a blend of the two averages the noises out)."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, ROWS)
    base = rng.normal(0, 1.0, ROWS)
    lead = 1 / (1 + np.exp(-(2.0 * y - 1 + base)))
    noise = base + rng.normal(0, 2.0, ROWS) if ours == "echo" else rng.normal(0, 1.4, ROWS)
    mine = 1 / (1 + np.exp(-(2.0 * y - 1 + noise)))
    results = {fit_id("lead", 0, 0): _fold("lead", lead[np.arange(0, ROWS, 5)], 1.0),
               fit_id("nn", 0, 0): _fold("nn", mine[np.arange(0, ROWS, 5)], seconds)}
    task = Task(fit_id("nn", 0, 0), "fit", DRIVER, model="nn", trial=0, fold=0)
    ctx = _ctx(y, results)
    return task, results[task.id], ctx


def test_a_dear_kind_that_loses_and_echoes_the_leader_is_withdrawn():
    task, result, ctx = _case("echo")
    others = rivals(task, result, ctx, ["lead", "nn"])
    assert list(others) == ["lead"]
    why = withdrawal(task, result, ctx, time_left=30.0, others=others)
    assert why is not None and why.leader == "lead" and why.score < why.leader_score
    assert why.folds_left == 4 and why.seconds_left == 20.0 and why.gain <= why.noise
    assert why.line().startswith("nn withdrawn after its first fold: roc_auc ")


@pytest.mark.parametrize("case, seconds, time_left", [
    ("own noise", 5.0, 30.0),  # weaker alone, but the blend gains beyond its noise: the ensemble would use it
    ("echo", 1.0, 30.0),  # 4 s of 30 left: cheap enough to finish
    ("echo", 5.0, 0.0),  # no time left to give anyone
])
def test_a_kind_the_blend_uses_or_whose_folds_are_cheap_stays(case, seconds, time_left):
    task, result, ctx = _case(case, seconds)
    assert withdrawal(task, result, ctx, time_left=time_left, others=rivals(task, result, ctx, ["lead"])) is None


def _weak(sd: float, seed: int, metric: str):
    """A leader as in `_case`, and a kind with noise of its own `sd` wide, judged by `metric`."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, ROWS)
    lead = 1 / (1 + np.exp(-(2.0 * y - 1 + rng.normal(0, 1.0, ROWS))))
    mine = 1 / (1 + np.exp(-(2.0 * y - 1 + rng.normal(0, sd, ROWS))))
    results = {fit_id("lead", 0, 0): _fold("lead", lead[np.arange(0, ROWS, 5)], 1.0),
               fit_id("nn", 0, 0): _fold("nn", mine[np.arange(0, ROWS, 5)], 5.0)}
    task = Task(fit_id("nn", 0, 0), "fit", DRIVER, model="nn", trial=0, fold=0)
    ctx = _ctx(y, results)
    ctx.metric, ctx.search_metric = METRICS[metric], choice_metric(METRICS[metric])
    return task, results[task.id], ctx


@pytest.mark.parametrize("sd, withdrawn", [(2.4, True), (1.4, False)])
def test_under_accuracy_the_blend_is_weighed_and_judged_by_the_log_loss_as_the_ensemble_does(sd, withdrawn):
    """Weighed by accuracy on the fold's rows, a blend with a much weaker kind 'gained' beyond its noise (the
    weights fit those rows' ties); the ensemble weighs by the log loss and gives that kind nothing, so it
    is withdrawn, on the log loss (its lead fold's score too), and the line says so. A kind of the leader's
    order with noise of its own still adds to the blend and stays."""
    task, result, ctx = _weak(sd, 1, "accuracy")
    why = withdrawal(task, result, ctx, time_left=30.0, others=rivals(task, result, ctx, ["lead"]))
    assert (why is not None) == withdrawn
    if withdrawn:
        assert why.metric == "log_loss" and why.gain <= why.noise and why.score > why.leader_score
        assert why.line().startswith("nn withdrawn after its first fold: log_loss ")


def test_a_kind_is_compared_only_with_first_trials_that_held_out_the_same_rows():
    task, result, ctx = _case("echo")
    ctx.outcome.results[fit_id("lead", 0, 0)] = _fold("lead", np.full(ROWS // 5, 0.5), fold=1)  # other rows
    assert rivals(task, result, ctx, ["lead"]) == {}
    later = Task(fit_id("nn", 1, 0), "fit", DRIVER, model="nn", trial=1, fold=0)  # not its first trial
    assert rivals(later, result, ctx, ["lead"]) == {}


def test_a_kind_is_judged_on_a_fold_that_ended_on_its_own_before_one_the_budget_stopped():
    """A fold stopped after a round or two of a slowed fit predicts nothing: where the kind has a whole fold
    another kind scored too, that one judges it; a stopped fold judges it only where none can (a slow kind's
    lead stopped at its share of the time)."""
    from pipeline.graph.withdrawal import judged_fold

    task, result, ctx = _case("own noise")  # nn's fold 0 ended whole, a blend uses it
    stopped = _fold("nn", np.full(ROWS // 5, 0.5), fold=1)
    stopped.stopped_by_budget = True
    ctx.outcome.results[fit_id("nn", 0, 1)] = stopped
    ranks = 0.25 + 0.5 * ctx.data.y[np.arange(1, ROWS, 5)]  # the leader's fold 1: every row in order
    ctx.outcome.results[fit_id("lead", 0, 1)] = _fold("lead", ranks, fold=1)
    later = Task(fit_id("nn", 0, 1), "fit", DRIVER, model="nn", trial=0, fold=1)
    fit, fold, others = judged_fold(later, stopped, ctx, ["lead", "nn"])
    assert (fit.id, fit.fold, fold) == (task.id, 0, result) and list(others) == ["lead"]
    assert withdrawal(fit, fold, ctx, time_left=30.0, others=others) is None  # judged on its whole fold: stays
    assert withdrawal(later, stopped, ctx, time_left=30.0, others=rivals(later, stopped, ctx, ["lead"]))
    stopped.stopped_by_budget = False  # a fold that ended on its own judges its kind itself
    assert judged_fold(later, stopped, ctx, ["lead", "nn"])[:2] == (later, stopped)
    stopped.stopped_by_budget = True
    del ctx.outcome.results[task.id]  # only the stopped fold has ended: it judges
    assert judged_fold(later, stopped, ctx, ["lead", "nn"])[:2] == (later, stopped)
    del ctx.outcome.results[fit_id("lead", 0, 1)]  # no other kind scored its rows yet: not judged now
    assert judged_fold(later, stopped, ctx, ["lead", "nn"])[2] == {}


def test_a_large_fold_is_judged_on_a_seeded_draw_of_its_rows(monkeypatch):
    """Past JUDGED_ROWS rows the scores, the blend and its noise are measured on a draw of that many."""
    import pipeline.graph.withdrawal as withdrawal_module

    task, result, ctx = _case("echo")
    whole = withdrawal(task, result, ctx, time_left=30.0, others=rivals(task, result, ctx, ["lead"]))
    monkeypatch.setattr(withdrawal_module, "JUDGED_ROWS", 400)
    drawn = withdrawal(task, result, ctx, time_left=30.0, others=rivals(task, result, ctx, ["lead"]))
    assert whole is not None and drawn is not None  # the same verdict
    assert drawn.score != whole.score and abs(drawn.score - whole.score) < 0.05  # scored on the draw


def _two_kinds():
    from pipeline.graph.plan import bag_id
    from pipeline.graph.time_budget import GraphCut

    tasks = [Task(fit_id(m, t, f), "fit", DRIVER, model=m, trial=t, fold=f) for m in "ab" for t in range(3)
             for f in range(3)]
    bags = [Task(bag_id(m, t), "bag", DRIVER, tuple(fit_id(m, t, f) for f in range(3)), model=m, trial=t)
            for m in "ab" for t in range(3)]
    ensemble = Task("ensemble", "ensemble", DRIVER, tuple(b.id for b in bags))
    return GraphCut([*tasks, *bags, ensemble], lambda t: t.kind == "ensemble"), {t.id: t for t in tasks}


def test_a_kind_whose_fit_failed_leaves_the_run_whole_and_the_last_kind_standing_does_not():
    from pipeline.graph.plan import bag_id
    from pipeline.graph.withdrawal import Withdrawals

    cut, fits = _two_kinds()
    cut.started |= {fit_id("b", 0, 0), fit_id("b", 0, 1)}  # its lead fold failed, its second still runs
    kinds = Withdrawals(["a", "b"], active=True)
    ids = kinds.fail(fits[fit_id("b", 0, 0)], "TypeError: boom", 2, cut)
    assert {bag_id("b", t) for t in range(3)} | {fit_id("b", 0, 0), fit_id("b", 0, 2)} <= set(ids)
    assert all(cut.cut[bag_id("b", t)] == "failed" for t in range(3))
    assert fit_id("b", 0, 1) not in cut.cut  # running: it ends on its own, read by no trial
    assert not any(i.startswith(("fit/a", "bag/a")) for i in ids) and "ensemble" not in cut.cut
    assert kinds.gone() == {"b"}
    assert kinds.lines() == [f"b left out: its fit {fit_id('b', 0, 0)} failed 2 time(s) (TypeError: boom)"]
    assert kinds.fail(fits[fit_id("b", 0, 1)], "TypeError: boom", 1, cut) is not None  # gone already: cut
    assert kinds.fail(fits[fit_id("a", 0, 0)], "ValueError", 2, cut) is None  # the last kind: the run fails
    assert Withdrawals(["a", "b"], active=False).fail(fits[fit_id("a", 0, 0)], "x", 2, _two_kinds()[0]) is None
