"""The benchmarks' in-process engine (bench.common.Engine) on data loaded once: how the GPU kit's
lightgbm, xgboost and packing steps run, here on the CPUs."""

from __future__ import annotations

import pipeline.data
from bench.common import Engine, leaderboard_scores, load_data

OVERRIDES = ["data=synthetic", "data.rows=3000", "data.features=6", "model=lightgbm", "tracking=none",
             "hpo=none", "model.lightgbm.params.num_iterations=10"]


def test_a_run_from_preloaded_data_never_calls_the_loader(tmp_path, monkeypatch):
    data = load_data(OVERRIDES, tmp_path / "engine")[0]

    def loader(*args, **kwargs):
        raise AssertionError("the engine loaded the data again")

    monkeypatch.setattr(pipeline.data, "load", loader)
    engine = Engine(tmp_path)
    result = engine.run(OVERRIDES, data)
    assert 0.5 < leaderboard_scores(result.leaderboard)["lightgbm"]["test"] <= 1.0
    assert result.seconds > 0 and (result.run_dir / "leaderboard.csv").exists()
    assert pipeline.data.load is loader  # put back after the run
    engine.clean(result)
    assert not result.run_dir.exists()


def test_a_device_comparison_names_the_device_each_side_fitted_on(tmp_path):
    """The GPU kit's learner comparisons record what each fit's record names: an OpenCL figure measured on a
    CPU device (PoCL's, listed before a GPU) shows it instead of passing for the GPU's."""
    from bench.suites.gpu import _compare

    data = load_data(OVERRIDES, tmp_path / "engine")[0]
    threads = OVERRIDES + ["model.lightgbm.resources.num_cpus=1"]
    figures = _compare(Engine(tmp_path), data, "lightgbm", "g", 1, "cpu", ("CPU", OVERRIDES), ("ONE", threads))
    named = {f["name"]: f.get("fitted_on") for f in figures}
    assert named["CPU seconds"] == ["cpu"] and named["ONE seconds"] == ["cpu"]
