"""The composition root: components by `_target_`, and every check before anything starts."""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.forkserver
import threading

import pytest

from pipeline.errors import PipelineError
from tests.conftest import FAULT_ENV, small

USER_COMPONENTS = ["allowed_targets=[tests.]",
                   "executor._target_=tests.user_components.InlineBackend",
                   "tracking._target_=tests.user_components.RecordingTracker"]


def test_a_users_own_executor_and_tracker_run_the_job(cli, tmp_path):
    cli("model=lightgbm", *small(("lightgbm",)), "parallelism.num_folds=2", "executor.max_retries=3",
        *USER_COMPONENTS, env=FAULT_ENV, check=True)
    (run_dir,) = (tmp_path / "outputs" / "runs").glob("*/*")
    fits = [json.loads(line) for line in (run_dir / "inline_fits.jsonl").read_text().splitlines()]
    assert sorted(f["task"] for f in fits) == ["fit/lightgbm/t0/f0", "fit/lightgbm/t0/f1"]
    assert {f["max_retries"] for f in fits} == {3}
    calls = [json.loads(line) for line in (tmp_path / "recorded_tracking.jsonl").read_text().splitlines()]
    assert [c["call"] for c in calls][:2] == ["connect", "start"]
    assert calls[-1] == {"call": "end", "status": "FINISHED"}
    assert {"seed", "hpo", "executor"} <= set(calls[1]["params"])
    assert any("lightgbm/val_roc_auc" in c.get("keys", ()) for c in calls)
    assert not (tmp_path / "outputs" / "mlflow.db").exists()  # the engine's MLflow tracker was not used


@pytest.mark.parametrize("overrides, message", [
    (["executor._target_=tests.user_components.InlineBackend"],
     "executor._target_='tests.user_components.InlineBackend' is outside the allowed modules"),
    (["tracking._target_=tests.user_components.RecordingTracker"],
     "tracking._target_='tests.user_components.RecordingTracker' is outside the allowed modules"),
    (["executor._target_=pipeline.executors.nothere"], "executor._target_='pipeline.executors.nothere' cannot be imported"),
    (["tracking._target_=pipeline.tracking.factory.mlfow_tracker"],
     "tracking._target_='pipeline.tracking.factory.mlfow_tracker' cannot be imported"),
])
def test_a_component_target_that_cannot_be_used_is_refused_before_planning(cli, overrides, message):
    proc = cli("model=lightgbm", "dry_run=true", *overrides, env=FAULT_ENV)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert "plan" not in proc.stdout.lower()


def test_dry_run_rejects_a_misspelt_library_parameter(cli):
    proc = cli("model=lightgbm", "+model.lightgbm.params.num_leafs=31", "dry_run=true")
    assert proc.returncode == 2
    assert "model.lightgbm.params.num_leafs is not a LightGBM parameter (did you mean 'num_leaves'?)" in proc.stderr
    assert "dry run: plan written" not in proc.stdout


class _Starts:
    """Records every process, thread and forkserver start and every ray.init of this process."""

    def __init__(self, monkeypatch):
        self.seen: list[str] = []
        start, ensure = multiprocessing.process.BaseProcess.start, multiprocessing.forkserver.ForkServer.ensure_running
        monkeypatch.setattr(multiprocessing.process.BaseProcess, "start",
                            lambda proc: (self.seen.append(f"process {proc.name}"), start(proc))[1])
        thread_start = threading.Thread.start
        monkeypatch.setattr(threading.Thread, "start",
                            lambda thread: (self.seen.append(f"thread {thread.name}"), thread_start(thread))[1])
        monkeypatch.setattr(multiprocessing.forkserver.ForkServer, "ensure_running",
                            lambda server: (self.seen.append("forkserver"), ensure(server))[1])
        try:
            import ray
        except ImportError:
            return
        init = ray.init
        monkeypatch.setattr(ray, "init", lambda *a, **k: (self.seen.append("ray.init"), init(*a, **k))[1])


PARALLEL = ["model=lightgbm", "parallelism.num_folds=2", "parallelism.fit.num_cpus=1", "executor.in_process=never",
            "data.max_rows=1000"]


@pytest.mark.parametrize("overrides, error", [
    (["+model.lightgbm.params.num_leafs=31", "tracking=none"], "num_leafs is not a LightGBM parameter"),
    (["+model.lightgbm.params.num_leafs=31"], "num_leafs is not a LightGBM parameter"),  # no tracker process either
    (["data=csv", "data.path=missing.csv", "data.label=y", "tracking=none"], "no such file"),
    (["eval_metric=rmse", "tracking=none"], "eval_metric='rmse' is not a binary metric"),
    (["executor=ray", "+model.lightgbm.params.num_leafs=31", "tracking=none"], "num_leafs is not a LightGBM parameter"),
    (["executor=ray", "data=csv", "data.path=missing.csv", "data.label=y", "tracking=none"], "no such file"),
], ids=["params", "params-tracked", "data", "metric", "ray-params", "ray-data"])
def test_no_worker_thread_forkserver_or_ray_starts_when_a_check_fails(compose, tmp_path, monkeypatch, overrides, error):
    from pipeline.run import Runtime, run

    starts = _Starts(monkeypatch)
    cfg = compose([*PARALLEL, *overrides])
    with pytest.raises(PipelineError, match=error):
        run(cfg, Runtime(tmp_path / "run", tmp_path))
    assert starts.seen == []
    assert multiprocessing.active_children() == []
    if "executor=ray" in overrides:
        import ray  # installed by the project's test setup: pip install -e '.[test,ray]'

        assert not ray.is_initialized()


def test_the_same_config_without_the_fault_starts_workers(compose, tmp_path, monkeypatch):
    """The guard above can fail: this plan does start a forkserver and workers once its checks pass."""
    from pipeline.run import Runtime, run

    starts = _Starts(monkeypatch)
    run(compose([*PARALLEL, "tracking=none", "model.lightgbm.params.num_iterations=5"]), Runtime(tmp_path / "run", tmp_path))
    assert "forkserver" in starts.seen and any(s.startswith("process fit-worker") for s in starts.seen)
    assert "thread worker-start" in starts.seen


@pytest.mark.parametrize("overrides, message", [
    (["eval_metric=rmse"], "eval_metric='rmse' is not a binary metric"),  # adult: binary, declared by its label
    (["eval_metric=auc"], "eval_metric='auc' is not a binary metric (did you mean 'roc_auc'?)"),
    (["data=california", "eval_metric=roc_auc"], "eval_metric='roc_auc' is not a regression metric"),
])
def test_a_dry_run_checks_the_eval_metric(cli, overrides, message):
    proc = cli("model=lightgbm", "dry_run=true", "tracking=none", *overrides)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert "dry run: plan written" not in proc.stdout


def test_a_dry_run_checks_the_metric_against_a_csv_files_label(cli, tmp_path):
    rows = "\n".join(f"{i % 7},{i * 0.5}" for i in range(60))
    (tmp_path / "t.csv").write_text("x,y\n" + rows + "\n")
    proc = cli("model=lightgbm", "data=csv", "data.path=t.csv", "data.label=y", "dry_run=true", "tracking=none",
               "eval_metric=roc_auc")
    assert proc.returncode == 2, proc.stderr
    assert "eval_metric='roc_auc' is not a regression metric" in proc.stderr


def test_parameters_are_checked_once_and_the_source_made_once(compose, tmp_path, monkeypatch):
    from pipeline.components import DataConf
    from pipeline.models.lightgbm import LightGBMModel
    from pipeline.run import Runtime, run

    checks, sources = [], []
    check = LightGBMModel.check_params.__func__
    monkeypatch.setattr(LightGBMModel, "check_params",
                        classmethod(lambda cls, *a: (checks.append(a[2:]), check(cls, *a))[1]))
    make = DataConf.make_source
    monkeypatch.setattr(DataConf, "make_source", lambda self: (sources.append(id(s := make(self))), s)[1])
    run(compose(["model=lightgbm", "tracking=none", "data.max_rows=400", "model.lightgbm.params.num_iterations=5",
                 "executor.in_process=always"]), Runtime(tmp_path / "run", tmp_path))
    assert checks == [("binary",)]  # once, with the problem type the label column told before loading
    assert len(sources) == 1  # as the settings were read: the checks, the plan, loading and tracking use it
