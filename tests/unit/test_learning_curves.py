"""The learning-curves plot: a curve recorded every few rounds (CatBoost under the engine's callback keeps
its metrics every METRIC_PERIOD rounds, NaN between) is drawn through its recorded rounds."""

import math

from pipeline import plots


def test_a_curve_recorded_every_few_rounds_is_drawn_through_its_recorded_rounds(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: drawn.append(fig))
    nan = math.nan
    curve = [0.9, nan, nan, 0.7, nan, nan, 0.6, 0.65]
    every_round = [0.5, 0.4, 0.3]
    assert plots.learning_curves({"catboost": {"valid_RMSE": curve}, "lightgbm": {"valid_l2": every_round}},
                                 tmp_path / "curves.png") is not None
    (figure,) = drawn
    recorded, whole = (ax.lines[0] for ax in figure.axes)
    assert list(recorded.get_xdata()) == [0, 3, 6, 7]
    assert list(recorded.get_ydata()) == [0.9, 0.7, 0.6, 0.65]
    assert list(whole.get_xdata()) == [0, 1, 2]
