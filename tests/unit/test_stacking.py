"""Stacking levels: the plan's shape, the checks of stack_levels, and no leakage of a fold model's
validation labels into what it learnt from or into its validation rows' features."""

from __future__ import annotations

import pytest

from pipeline.graph import stacking
from pipeline.errors import ConfigError

KINDS = ("prov_a", "prov_b")


def stacked_plan(num_folds=5, stack_levels=1, kinds=KINDS, num_trials=1, refit=False, evaluate=False):
    from pipeline.hardware import Machine, resolve
    from pipeline.graph.plan import build_plan
    from pipeline.resources import ModelNeeds, Request
    from pipeline.planning.allocation import allocate

    hw = resolve(None, Machine(2), dry_run=False)
    allocations = [allocate(hw.total, Request.parse(None, None, "b"), Request.parse(1, None, "f"),
                            ModelNeeds(kind, False, False, 1), num_folds=num_folds, num_trials=num_trials)
                   for kind in kinds]
    return build_plan(hw, allocations, evaluate=evaluate, refit=refit, stack_levels=stack_levels)


def run_stacked(plan, data, tmp_path, submitted=None):
    from pipeline.config import HpoConf
    from pipeline.executors.local import InProcessBackend
    from pipeline.graph.scheduler import Scheduler
    from pipeline.hpo import TrialSource
    from pipeline.metrics import METRICS
    from pipeline.store import ResultStore
    from tests.stack_models import ProvenanceModel

    class Recording(InProcessBackend):
        def submit(self, request):
            if submitted is not None:
                submitted.append(request.task_id)
            return super().submit(request)

    prototypes = {a.model: ProvenanceModel({}, a.model) for a in plan.allocations}
    with Recording() as backend:
        return Scheduler(plan, backend, ResultStore(tmp_path / "run"), TrialSource(HpoConf(), {}, {}, "maximize"),
                         prototypes, data, METRICS["roc_auc"], seed=0).run()


def leaks(plan, outcome) -> list[str]:
    """Every fold model (at every level) whose validation rows' labels it learnt from, directly or
    through its stacked features, or whose validation rows' features carry them."""
    from tests.stack_models import LEARNT

    found = []
    for level in range(1, plan.stack_levels + 2):
        for kind in (a.model for a in plan.allocations):
            bag = outcome.best(stacking.level_name(kind, level), _Higher())
            for k, fold in enumerate(bag.folds):
                validation, record = set(fold.held_out.tolist()), LEARNT[fold.model.id_]
                if validation & record["learnt"]:
                    count = len(validation & record["learnt"])
                    found.append(f"{bag.model} fold {k} learnt {count} validation label(s)")
                if validation & record["val_features"]:
                    found.append(f"{bag.model} fold {k}: its validation rows' features carry their labels")
    return found


class _Higher:
    def better(self, a, b):
        return a > b


def plain_out_of_fold(fold_set, level, top, num_folds):
    """The usual scheme: a training row of fold j gets the fold model M(l-1, {j})'s prediction."""
    return [((j,), j) for j in range(num_folds) if j not in fold_set] + [(fold_set, None)]


@pytest.mark.parametrize("num_folds, stack_levels", [(5, 1), (4, 2), (5, 2), (10, 1)])
def test_no_fold_model_at_any_level_learns_or_is_fed_its_validation_labels(adult, tmp_path, num_folds, stack_levels):
    from tests.stack_models import LEARNT

    plan = stacked_plan(num_folds, stack_levels)
    outcome = run_stacked(plan, adult, tmp_path)
    assert leaks(plan, outcome) == []
    rows = set(adult.fit_idx(True).tolist())
    top = stacking.level_name("prov_a", stack_levels + 1)
    for k, fold in enumerate(outcome.best(top, _Higher()).folds):
        record = LEARNT[fold.model.id_]
        # learnt from every other row (through the levels below), and fed one column per kind of the level below
        assert record["learnt"] == rows - set(fold.held_out.tolist())
        assert record["columns"] == (f"stack_l{stack_levels}_prov_a_p1", f"stack_l{stack_levels}_prov_b_p1")


def test_plain_out_of_fold_stacking_leaks_and_the_provenance_check_sees_it(adult, tmp_path, monkeypatch):
    monkeypatch.setattr(stacking, "feature_sources", plain_out_of_fold)
    plan = stacked_plan(4, 1)
    found = leaks(plan, run_stacked(plan, adult, tmp_path))
    assert len(found) == 2 * 4  # each level-2 fold model of each kind learnt its validation labels
    assert all("learnt" in f for f in found)


def test_five_folds_and_one_level_fit_fourteen_models_per_kind_each_after_its_features():
    plan = stacked_plan(5, 1)
    fits = [t for t in plan.fit_tasks if t.model == "prov_a"]
    # 5 fold models, 4 inner models on 2 folds each (a two-fold split of the 4 folds outside each fold model),
    # 5 level-2 fold models
    assert stacking.fits_per_kind(5, 1, refit=False) == len(fits) == 5 + 4 + 5
    assert sorted(t.fold_set for t in fits if t.level == 1 and t.fold_set) == [(0, 1, 2), (0, 3, 4), (1, 2, 3),
                                                                              (1, 2, 4)]
    assert sum(t.level == 2 for t in fits) == 5
    ids = {t.id: t for t in plan.tasks}
    l2 = ids["fit/prov_a/l2/f3"]
    assert (l2.level, l2.fold, l2.fold_set) == (2, 3, (3,))
    # folds 0 and 4 filled by the model without {0, 3, 4}, folds 1 and 2 by the one without {1, 2, 3}
    assert set(l2.depends_on) == {f"fit/{kind}/l1/{s}" for kind in KINDS for s in ("f0+3+4", "f1+2+3")} \
        | {"bag/prov_a/t0", "bag/prov_b/t0"}
    assert ids["fit/prov_b/l1/f1+2+4"].depends_on == ("bag/prov_b/t0",)  # the best trial's parameters
    assert ids["bag/prov_a/l2"].depends_on == tuple(f"fit/prov_a/l2/f{k}" for k in range(5))
    inner_wave = min(t.wave for t in plan.fit_tasks if t.level == 1 and t.fold_set)
    assert inner_wave > max(t.wave for t in plan.fit_tasks if t.fold_set is None)
    assert min(t.wave for t in fits if t.level == 2) > inner_wave


@pytest.mark.parametrize("num_folds, stack_levels",
                         [(k, levels) for levels in (1, 2) for k in range(levels + 2, 13)])
def test_each_feature_comes_from_a_model_left_out_of_the_rows_it_fills_and_inner_models_keep_half_the_folds(
        num_folds, stack_levels):
    top = stack_levels + 1
    for level in range(2, top + 1):
        below = stacking.fold_sets(level - 1, top, num_folds, refit=False)
        for fold_set in stacking.fold_sets(level, top, num_folds, refit=True):
            sources = stacking.feature_sources(fold_set, level, top, num_folds)
            assert [fold for _, fold in sources] == [j for j in range(num_folds) if j not in fold_set] + [None]
            for producer, fold in sources:
                if not fold_set:  # the refit: each row from the fold model that did not learn it, the rest from
                    assert producer == ((fold,) if fold is not None else ())  # the refit below
                    continue
                assert producer in below and set(fold_set) | ({fold} if fold is not None else set()) <= set(producer)
                assert len(producer) < num_folds  # it learnt from some fold
    half = -(-(num_folds - 1) // 2)
    for level in range(1, top + 1):
        for fold_set in stacking.fold_sets(level, top, num_folds, refit=False):
            # the folds it learns from, less the one each level below it leaves out more
            kept = num_folds - len(fold_set) - (level - 1)
            exact = top - level + 1  # the size the smallest scheme (S + one fold per level above) needs
            assert kept >= half or len(fold_set) <= exact, (level, fold_set)
    assert stacking.fits_per_kind(num_folds, stack_levels, refit=False) <= _exact_fits(num_folds, stack_levels)


def _exact_fits(num_folds: int, stack_levels: int) -> int:
    """Fits per kind when every fold set of 1 .. (top - l + 1) folds is fitted at level l."""
    from math import comb

    top = stack_levels + 1
    return sum(comb(num_folds, size) for level in range(1, top + 1) for size in range(1, top - level + 2))


def test_the_inner_models_cover_at_five_folds_is_smaller_than_every_pair_and_as_small_as_a_cover_can_be():
    from itertools import combinations

    inner = [s for s in stacking.fold_sets(1, 2, 5, refit=False) if len(s) > 1]
    assert all(len(s) == 3 for s in inner)
    pairs = set(combinations(range(5), 2))
    assert all(any(set(p) <= set(s) for s in inner) for p in pairs)
    assert len(inner) == 4  # a set of 3 folds holds 3 of the 10 pairs: 3 sets cannot cover them
    assert stacking.fold_sets(1, 2, 3, refit=False)[3:] == [(0, 1), (0, 2), (1, 2)]  # k=3: pairs, as before


def test_every_level_shows_in_the_plan_json_and_the_printed_plan(tmp_path):
    import json

    from tests.conftest import printed_plan

    plan = stacked_plan(3, 1, refit=True, evaluate=True)
    tasks = {t["id"]: t for t in json.loads(plan.write(tmp_path / "plan.json").read_text())["tasks"]}
    assert tasks["fit/prov_a/l2/f1"]["level"] == 2 and tasks["fit/prov_a/l2/f1"]["fold_set"] == [1]
    assert tasks["fit/prov_a/t0/f1"]["level"] == 1 and "fold_set" not in tasks["fit/prov_a/t0/f1"]
    assert tasks["fit/prov_b/l2/refit"]["fold_set"] == [] and tasks["bag/prov_b/l2"]["level"] == 2
    assert tasks["refit"]["depends_on"] == ["ensemble", "fit/prov_a/l1/refit", "fit/prov_b/l1/refit",
                                            "fit/prov_a/l2/refit", "fit/prov_b/l2/refit"]
    text = printed_plan(plan)
    assert "levels: 1 (3 fold fit(s), 3 without 2+ folds, refit); 2 (3 fold fit(s), refit)" in text
    assert ("fit ×6 → bag ×2 → fit L1 ×6 → fit L2 ×6 → bag L2 ×2 → ensemble → refit fit ×4 → refit → evaluate"
            in text)
    assert "l2/f0" in text
    from pipeline.graph.nodes import node_kind

    for levels, words in ((1, "its bags at level 2, and"), (2, "its bags at levels 2 to 3, and")):
        two = stacked_plan(3, levels, evaluate=True)
        assert words in node_kind("ensemble").describe([t for t in two.tasks if t.kind == "ensemble"], two)


def test_admission_counts_a_stacked_level_as_one_more_trial_of_its_model():
    from pipeline.graph.plan import Admission

    plan = stacked_plan(3, 1, kinds=("prov_a",))
    admission = Admission(plan.hardware, plan.allocations)
    alloc = plan.allocations[0]
    level2 = [t for t in plan.fit_tasks if t.level == 2]
    admitted = [t for t in level2 if admission.try_admit(t) is not None]
    assert len(admitted) == alloc.folds_parallel
    assert {t.slot for t in admitted} == {("prov_a", "level 2")}


@pytest.mark.parametrize("value, folds, message", [
    (-1, 5, "stack_levels=-1 must be a whole number from 0 \\(no stacking\\) to 2"),
    (3, 5, "stack_levels=3 must be a whole number from 0 \\(no stacking\\) to 2: leak-free stacking"),
    (1, 2, "stack_levels=1 needs parallelism.num_folds >= 3 \\(it is 2\\)"),
    (2, 3, "stack_levels=2 needs parallelism.num_folds >= 4 \\(it is 3\\)"),
    (1, 1, "stack_levels=1 needs parallelism.num_folds >= 3 \\(it is 1\\)"),
])
def test_stack_levels_is_checked_against_its_range_and_the_folds(compose, value, folds, message):
    from pipeline.settings import read_settings

    cfg = compose(["model=lightgbm", f"stack_levels={value}", f"parallelism.num_folds={folds}"])
    with pytest.raises(ConfigError, match=message):
        read_settings(cfg)


def test_stack_levels_defaults_to_none_and_is_read_into_the_settings(compose):
    from pipeline.settings import read_settings

    assert read_settings(compose(["model=lightgbm"])).conf.stack_levels == 0
    assert read_settings(compose(["model=lightgbm", "parallelism=bag5", "stack_levels=2"])).conf.stack_levels == 2


def test_a_stacked_plan_run_again_on_its_store_fits_nothing_anew(adult, tmp_path):
    """Its features are the same (the level below is the same): every stacked fit's key is found."""
    plan = stacked_plan(3, 1)
    first, again = [], []
    outcome = run_stacked(plan, adult, tmp_path, first)
    rerun = run_stacked(plan, adult, tmp_path, again)
    assert len(first) == len(plan.fit_tasks) and again == []
    assert rerun.best("prov_a_l2", _Higher()).score == outcome.best("prov_a_l2", _Higher()).score


def test_the_progress_counts_every_fit_of_a_model_at_every_level():
    from types import SimpleNamespace

    from pipeline.outputs import RunHooks
    from pipeline.report import FitProgress

    plan = stacked_plan(5, 1, refit=True, evaluate=True)
    progress = FitProgress(plan, enabled=False)
    totals = {model: progress.progress.tasks[i].total for model, i in progress.ids.items()}
    assert totals == {"prov_a": 5 + 4 + 5 + 2, "prov_b": 16}
    cut = [t for t in plan.fit_tasks if t.model == "prov_a"][:3] + [t for t in plan.tasks if t.kind == "bag"]
    RunHooks(progress, SimpleNamespace(), None, log_trials=False).on_tasks_cut(cut)
    assert progress.progress.tasks[progress.ids["prov_a"]].total == 16 - 3  # its fits at once, not the bags


def test_three_levels_with_refit_run_to_a_leaderboard_whose_predictors_chain_every_level(adult, tmp_path):
    import numpy as np

    from pipeline.graph.plan import EVALUATE

    plan = stacked_plan(4, 2, refit=True, evaluate=True)
    outcome = run_stacked(plan, adult, tmp_path)
    rows = {r["model"]: r["level"] for r in outcome.results[EVALUATE].rows}
    assert rows == {"prov_a": 1, "prov_b": 1, "prov_a_l2": 2, "prov_b_l2": 2, "prov_a_l3": 3, "prov_b_l3": 3,
                    "ensemble": 4, "prov_a_refit": 1, "prov_b_refit": 1, "prov_a_l2_refit": 2, "prov_b_l2_refit": 2,
                    "prov_a_l3_refit": 3, "prov_b_l3_refit": 3, "ensemble_refit": 4}
    predictors = {**outcome.results["ensemble"].predictors, **outcome.results["refit"].predictors}
    X_test = adult.X.iloc[adult.test_idx]
    for name in ("prov_a_l3", "prov_b_l3_refit", "ensemble", "ensemble_refit"):
        predictors[name].predict_typed(X_test)  # every model of the chain is fed the columns it learnt from
    refit = outcome.results["fit/prov_a/l3/refit"]
    np.testing.assert_allclose(predictors["prov_a_l3_refit"].predict_typed(X_test), refit.test_pred)
    from pipeline.objectives import inner_fit_seconds

    inner = inner_fit_seconds(plan.fit_tasks, outcome.results)  # what a stacked top row's fit_seconds adds
    assert set(inner) == {1, 2}  # levels 1 and 2 make features for the level above; level 3 has only its folds
    for level in (1, 2):
        ids = [t for t in outcome.results if t.startswith("fit/") and f"/l{level}/f" in t and "+" in t]
        assert ids and inner[level] == pytest.approx(sum(outcome.results[t].fit_seconds for t in ids))


def test_the_queue_starts_the_longest_chain_of_work_first_and_unmeasured_models_before_measured_ones(tmp_path):
    """Critical-path order: with the first kind's fits measured at 4 s and the second's at 1 s, the first
    kind's level-1 folds (whose inner models and level-2 fits follow) lead, its inner models come
    before the second kind's level-1 folds, the level-2 fits come last, the longest first. A kind
    with no finished fit yet goes before every measured one."""
    from pipeline.config import HpoConf
    from pipeline.executors.local import InProcessBackend
    from pipeline.graph.scheduler import Scheduler
    from pipeline.hpo import TrialSource
    from pipeline.metrics import METRICS
    from pipeline.store import ResultStore

    plan = stacked_plan(5, 1, evaluate=True)
    scheduler = Scheduler(plan, InProcessBackend(), ResultStore(tmp_path), TrialSource(HpoConf(), {}, {}, "maximize"),
                          {}, None, METRICS["roc_auc"], seed=0)
    fits = list(plan.fit_tasks)

    def order():
        ranked = sorted(fits, key=scheduler._priority)
        return [(t.model, "l1" if t.fold_set is None else ("inner" if len(t.fold_set) > 1 else "l2"))
                for t in ranked]

    assert order()[:5] == [("prov_a", "l1")] * 5  # nothing measured: the plan's order
    scheduler.ranks.record("prov_b", 1.0)
    assert list(dict.fromkeys(order()))[:2] == [("prov_a", "l1"), ("prov_a", "inner")]  # prov_a: not measured
    scheduler.ranks.record("prov_a", 4.0)
    groups = list(dict.fromkeys(order()))
    assert groups == [("prov_a", "l1"), ("prov_a", "inner"), ("prov_b", "l1"), ("prov_b", "inner"),
                      ("prov_a", "l2"), ("prov_b", "l2")]
    assert not scheduler.ranks.stale
    scheduler.ranks.record("prov_a", 4.2)  # the mean moves by less than a tenth: the ranks stay
    assert not scheduler.ranks.stale
    scheduler.ranks.record("prov_a", 12.0)
    assert scheduler.ranks.stale


@pytest.mark.parametrize("levels, folds, derived", [(1, 1, 5), (2, 1, 5), (1, 2, 5), (1, 3, None), (0, 1, None),
                                                    (3, 1, None)])
def test_the_folds_stacking_needs_are_derived_when_too_few(levels, folds, derived):
    from pipeline.graph.stacking import folds_for

    assert folds_for(levels, folds) == derived


def test_stacking_with_no_parallelism_chosen_bags_and_says_so(compose, capsys):
    """As AutoGluon's num_stack_levels turns bagging on: stack_levels=1 alone is a 5-fold bag per model, said;
    a parallelism the command line chose with too few folds is still refused."""
    from pipeline.settings import read_settings

    settings = read_settings(compose(["model=lightgbm", "stack_levels=1"]), ("model=lightgbm", "stack_levels=1"))
    assert settings.conf.parallelism.num_folds == 5 and settings.levels.num_folds == 5
    assert settings.params["parallelism.num_folds"] == 5  # what MLflow logs is what ran
    assert "stack_levels=1 with no parallelism chosen: each model is a 5-fold bag" in capsys.readouterr().out
    chosen = ("model=lightgbm", "parallelism=default", "stack_levels=1")
    with pytest.raises(ConfigError, match="stack_levels=1 needs parallelism.num_folds >= 3 \\(it is 1\\)"):
        read_settings(compose(list(chosen)), chosen)
    with pytest.raises(ConfigError, match="needs parallelism.num_folds >= 3"):
        read_settings(compose(["model=lightgbm", "stack_levels=1"]))  # overrides unknown: nothing derived
