"""The checks before a run acts: the problem type read from the label column alone (as loading infers
it), the eval metric and the parameters checked once, the data source made once, fits against nodes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.errors import ConfigError, HardwareError


def _spec(**values):
    from pipeline.config import DataConf

    return DataConf(**values)


def _table(path: Path, y, rows: int = 200) -> Path:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=rows).astype(np.float32), "b": rng.integers(0, 9, rows), "y": y})
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    return path


LABELS = {
    "binary-text": lambda n, rng: rng.choice(["no", "yes"], n),
    "multiclass-int": lambda n, rng: rng.integers(0, 5, n),
    "regression": lambda n, rng: rng.normal(size=n),
    "rare-class": lambda n, rng: np.r_[rng.integers(0, 2, n - 1), 7],  # max_rows may sample the 7 away
}


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("labels", LABELS)
@pytest.mark.parametrize("max_rows", [None, 150])
def test_the_problem_type_before_loading_is_what_loading_finds(tmp_path, suffix, labels, max_rows):
    from pipeline import data as data_module

    y = LABELS[labels](200, np.random.default_rng(1))
    if labels == "rare-class":
        y = y.astype(float)
        y[3] = np.nan  # a row without a label, dropped before the sample, as loading drops it
    path = _table(tmp_path / f"t{suffix}", y)
    spec = _spec(name="t", _target_=f"pipeline.data_sources.{suffix[1:].capitalize()}Source", path=str(path), label="y", max_rows=max_rows, seed=3)
    before = spec.make_source().problem_type(tmp_path)
    assert before == data_module.load(spec, tmp_path).problem_type


def test_a_declared_or_generated_problem_type_needs_no_read(tmp_path):
    assert _spec(name="t", _target_="pipeline.data_sources.CsvSource", path="absent.csv", label="y", problem_type="regression") \
        .make_source().problem_type(tmp_path) == "regression"
    for classes, expected in ((0, "regression"), (2, "binary"), (4, "multiclass")):
        assert _spec(name="s", _target_="pipeline.data_sources.SyntheticSource", classes=classes).make_source().problem_type(tmp_path) == expected
    assert _spec().make_source().problem_type(tmp_path) == "binary"  # bundled adult: its label column


def test_a_remote_table_leaves_the_problem_type_to_loading(tmp_path):
    assert _spec(name="t", _target_="pipeline.data_sources.CsvSource", path="s3://bucket/t.csv", label="y").make_source().problem_type(tmp_path) is None


def test_the_data_source_is_made_once_as_the_settings_are_read_and_no_config_holds_it(compose, tmp_path):
    from pipeline.settings import read_settings

    path = _table(tmp_path / "t.csv", np.arange(200) % 2)
    settings = read_settings(compose(["model=lightgbm", "data=csv", f"data.path={path}", "data.label=y"]))
    assert settings.source.spec is settings.conf.data and settings.source.kind == "csv"
    attributes = dict(vars(settings.conf.data))
    assert settings.conf.data.make_source() is not settings.source  # a new one each time: the run makes one
    assert vars(settings.conf.data) == attributes
    assert [f.name for f in dataclasses.fields(settings.conf.data)] == list(attributes)


def test_an_unknown_metric_name_is_refused_without_the_problem_type():
    from pipeline import metrics

    with pytest.raises(ConfigError, match=r"eval_metric='auc' is not a metric \(did you mean 'roc_auc'\?\)"):
        metrics.check_name("auc")
    metrics.check_name("rmse")
    metrics.check_name("auto")


def _plan_with_fit(num_cpus: int, num_gpus: float):
    from fractions import Fraction

    from pipeline.graph.plan import Plan, Task
    from pipeline.resources import Resources

    task = Task("fit/m/t0/f0", "fit", Resources(num_cpus, Fraction(num_gpus)), model="m", trial=0, fold=0)
    return Plan(hardware=None, allocations=(), tasks=(task,))


def test_every_fit_must_fit_on_one_node():
    from pipeline.executors.ray import check_fits_on_nodes

    nodes = ((2.0, 2.0), (2.0, 2.0))
    check_fits_on_nodes(_plan_with_fit(2, 1), nodes, "executor.address='auto'")
    with pytest.raises(HardwareError, match=r"task fit/m/t0/f0 asks for 3 CPU / 0 GPU, but executor.address='auto' "
                                            r"has 4 CPU / 4 GPU over 2 node\(s\), the largest node 2 CPU / 2 GPU"):
        check_fits_on_nodes(_plan_with_fit(3, 0), nodes, "executor.address='auto'")


def test_the_fits_too_large_counted_include_the_trials_the_plan_does_not_list():
    from pipeline.executors.ray import check_fits_on_nodes
    from tests.unit.test_trial_scaling import _plan

    plan = _plan(10, folds=2, models=("a",))  # lists 4 of the 10 trials
    assert plan.listed["a"] < 10 and plan.num_fits == 20
    with pytest.raises(HardwareError, match=r"task fit/a/t0/f0 asks for 1 CPU / 0 GPU \(and 19 more fit\(s\) too large"):
        check_fits_on_nodes(plan, ((0.5, 0.0),), "executor.address='auto'")
