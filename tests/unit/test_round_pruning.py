"""Round-by-round pruning: rungs at geometric steps, thresholds from every earlier fit, a bounded share
of typical fits stopped (no ratchet), clearly losing fits stopped early, constant work per fit."""

import random

import pytest

from pipeline.graph.round_pruning import FoldPruner, RungTable, percentile, rungs


def _curve(rng, level: float, rounds: int = 300, every: int = 10) -> dict[int, float]:
    """A validation-loss curve reported every `every` rounds: falling towards `level`, with noise."""
    return {s: level + 0.3 / (1 + s / 20) + rng.gauss(0, 0.002) for s in range(0, rounds + 1, every)}


def _fit(curve: dict[int, float], table: RungTable) -> FoldPruner:
    pruner = FoldPruner(table.thresholds())
    for step in sorted(curve):
        if pruner(step, curve[step]):
            break
    table.add(pruner.values)
    return pruner


def test_rungs_are_the_unit_times_powers_of_three_with_the_best_loss_so_far():
    curve = {0: 1.0, 10: 0.8, 20: 0.9, 30: 0.85, 60: 0.5, 90: 0.7, 100: 0.6}
    assert rungs(curve) == {10: 0.8, 30: 0.8, 90: 0.5}
    assert rungs({0: 0.7, 1: 0.6, 2: 0.5, 3: 0.55, 9: 0.4}) == {1: 0.6, 3: 0.5, 9: 0.4}  # epochs
    assert rungs({0: 0.7}) == {}


def test_percentile_interpolates_between_ranks_as_numpy_does():
    import numpy as np

    values = sorted(random.Random(1).random() for _ in range(17))
    assert abs(percentile(values, 75) - np.percentile(values, 75)) < 1e-12
    assert percentile([2.0], 75) == 2.0


def test_nothing_is_judged_before_three_fits_reached_a_rung():
    table = RungTable()
    for level in (0.5, 0.4):
        table.add({0: 1.0, 10: level})
    assert table.thresholds() == ()
    assert not _fit({0: 1.0, 10: 9.0, 20: 9.0}, table).pruned
    assert table.thresholds() and table.thresholds()[0][0] == 10


def test_typical_fits_mostly_run_to_the_end_there_is_no_ratchet():
    """A search of fits alike but for noise: at every rung, the ones judged against the earlier ones.
    Judged at every report against the median of the fits that were not stopped (the earlier rule)
    stops nearly all; here a quarter at each of the few rungs (4 of 300 rounds: 1 - 0.75^4 = 0.68)."""
    rng, table = random.Random(0), RungTable()
    fits = [_fit(_curve(rng, 0.40), table) for _ in range(300)]
    stopped = sum(f.pruned for f in fits)
    assert stopped / len(fits) < 0.75, stopped
    first = sum(f.pruned and max(f.values) == 10 for f in fits)
    assert first / len(fits) < 0.35, first


def test_a_clearly_losing_fit_stops_at_its_first_rung_and_a_better_one_runs_on():
    rng, table = random.Random(2), RungTable()
    for _ in range(20):
        _fit(_curve(rng, 0.40), table)
    bad = _fit(_curve(rng, 0.60), table)
    good = _fit(_curve(rng, 0.30), table)
    assert bad.pruned and max(bad.values) == 10
    assert not good.pruned and max(good.values) == 300


def test_a_fit_receives_a_few_thresholds_whatever_the_number_of_earlier_fits():
    rng, table = random.Random(3), RungTable()
    for _ in range(2000):
        table.add(_curve(rng, 0.4 + rng.random() * 0.1))
    assert len(table.thresholds()) == len(rungs(_curve(rng, 0.4))) == 4  # rounds 10, 30, 90, 270 of 300


def _path(rng, level: float, pace: float, rounds: int) -> dict[int, float]:
    """A booster's curve as a function of its paced steps (rounds x its learning rate over the own one):
    boosting with a smaller rate walks the same path in smaller steps, reported every 10 rounds."""
    return {s: level + 0.3 / (1 + s * pace / 20) + rng.gauss(0, 0.002) for s in range(0, rounds + 1, 10)}


def _paced_fit(curve: dict[int, float], table: RungTable, pace: float) -> FoldPruner:
    pruner = FoldPruner(table.thresholds(), pace)
    for step in sorted(curve):
        if pruner(step, curve[step]):
            break
    table.add(pruner.values, pace)
    return pruner


def test_a_rung_is_read_at_the_rounds_a_fits_learning_rate_makes_up_for():
    curve = {s: 1.0 - s / 1000 for s in range(0, 301, 10)}
    assert rungs(curve, pace=0.2) == {10: curve[50], 30: curve[150]}  # rung 90 is 450 rounds away
    assert rungs(curve, pace=4.0) == {90: curve[20], 270: curve[60], 810: curve[200]}  # 10, 30: before round 10
    assert rungs(curve, pace=1 / 3) == {10: curve[30], 30: curve[90], 90: curve[270]}


def test_a_slow_learner_on_the_same_path_is_not_stopped_for_its_rate():
    """Fits at the own learning rate, then one at a fifth of it that ends lower: judged round for round
    (pace 1) it is losing at every early rung and stops; judged at its paced steps it runs to its end."""
    for pace, stopped in ((1.0, True), (0.2, False)):
        rng, table = random.Random(5), RungTable()
        for _ in range(20):
            _paced_fit(_path(rng, 0.40, 1.0, 300), table, 1.0)
        slow = _paced_fit(_path(rng, 0.38, 0.2, 1500), table, pace)
        assert slow.pruned is stopped, (pace, max(slow.values))


def test_a_fit_judges_each_rung_as_its_finished_curve_reads_it():
    """The pruner inside the fit stops exactly when the rungs of its curve so far cross a threshold."""
    rng = random.Random(7)
    for _ in range(300):
        pace = rng.choice([0.1, 0.25, 1 / 3, 0.5, 1.0, 1.7, 2.0, 4.0])
        thresholds = tuple((r, 0.40 + rng.random() * 0.3) for r in (10, 30, 90, 270))
        curve = _path(rng, 0.40 + rng.random() * 0.2, pace, 600)
        pruner = FoldPruner(thresholds, pace)
        for step in sorted(curve):
            if pruner(step, curve[step]):
                break
        read = rungs(pruner.values, pace)
        limits = dict(thresholds)
        losing = [r for r, best in read.items() if r in limits and not best <= limits[r]]
        assert pruner.pruned == bool(losing)
        if losing:  # it stopped at the first report that reached the first losing rung
            assert max(pruner.values) * pace >= min(losing) and (max(pruner.values) - 10) * pace < min(losing)


def test_the_pace_is_the_ratio_of_learning_rates_under_any_of_their_names():
    from pipeline.graph.round_pruning import pace

    names = ("learning_rate", "eta")
    assert pace(names, {"learning_rate": 0.01}, {"learning_rate": 0.05}) == pytest.approx(0.2)
    assert pace(names, {"eta": 0.3}, {"learning_rate": 0.1}) == pytest.approx(3.0)
    assert pace(names, {}, {"eta": 0.05}, default=0.1) == 2.0  # the library's default where none is set
    assert pace(names, {"eta": 0.1}, {}) == 1.0 and pace((), {"eta": 0.1}, {"eta": 0.2}) == 1.0


def test_a_trials_fit_request_carries_its_pace_against_the_models_own_params():
    from pipeline.graph.nodes.fit import _pace
    from pipeline.models import LightGBMModel, XGBoostModel

    assert _pace(LightGBMModel({"learning_rate": 0.05}), {"learning_rate": 0.01}) == pytest.approx(0.2)
    assert _pace(XGBoostModel({"eta": 0.05}), {"eta": 0.15}) == pytest.approx(3.0)
    assert _pace(XGBoostModel({}), {"eta": 0.15}) == 0.5  # against XGBoost's default rate, 0.3


def test_a_slower_learner_may_run_the_rounds_that_take_it_as_far_as_the_own_params_cap():
    from pipeline.graph.round_pruning import paced_rounds

    names = ("num_iterations", "num_boost_round")
    assert paced_rounds(names, {"learning_rate": 0.01}, {"num_iterations": 1000}, 0.2) == {
        "learning_rate": 0.01, "num_iterations": 5000}
    assert paced_rounds(names, {"eta": 0.2}, {"num_boost_round": 1000}, 4.0) == {"eta": 0.2}  # never fewer
    assert paced_rounds(names, {"num_iterations": 300}, {"num_iterations": 1000}, 0.5)["num_iterations"] == 600
    assert paced_rounds((), {"eta": 0.01}, {"num_boost_round": 1000}, 0.1) == {"eta": 0.01}


def test_under_hpo_auto_a_trials_fits_and_its_record_take_its_paced_rounds():
    """The fit request and the trial's record (leaderboard, MLflow) read the same params: under hpo=auto a
    LightGBM trial at a fifth of the own rate may run five times the rounds; a searcher the user chose
    keeps the params' cap."""
    from types import SimpleNamespace

    from pipeline.graph.nodes.fit import trial_params
    from pipeline.models import LightGBMModel
    from pipeline.searchers import AutoSearch, TpeSearch

    own = LightGBMModel({"learning_rate": 0.05, "num_iterations": 1000})
    for searcher, rounds in ((AutoSearch(), 5000), (TpeSearch(), None)):
        trials = SimpleNamespace(searcher=searcher, params=lambda model, trial: {"learning_rate": 0.01})
        ctx = SimpleNamespace(trials=trials, prototypes={"lightgbm": own})
        params, pace = trial_params(ctx, "lightgbm", 3)
        assert pace == pytest.approx(0.2) and params.get("num_iterations") == rounds
