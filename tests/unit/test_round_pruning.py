"""Round-by-round pruning: rungs at geometric steps, thresholds from every earlier fit, a bounded share
of typical fits stopped (no ratchet), clearly losing fits stopped early, constant work per fit."""

import random

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
