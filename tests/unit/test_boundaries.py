"""Where things live: planning reads a typed input, not the settings; the config is checked in one pass
that changes nothing; the root knows no executor or tracker by name; side effects go through hooks, and
only pipeline.tracking imports MLflow."""

from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import json
from pathlib import Path

PIPELINE = Path(__file__).resolve().parents[2] / "pipeline"


def _imported(path: Path) -> set[str]:
    """Every module `path` imports, wherever the statement sits (inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def test_only_the_tracking_package_imports_mlflow():
    """The engine's code, that is: the contract suites (pipeline/testing) read a store back to check it."""
    outside = sorted(str(p.relative_to(PIPELINE)) for p in PIPELINE.rglob("*.py")
                     if not {"tracking", "testing"} & set(p.relative_to(PIPELINE).parts)
                     and any(m == "mlflow" or m.startswith("mlflow.") for m in _imported(p)))
    assert outside == []


def test_the_root_names_no_executor_and_no_tracker():
    imported = _imported(PIPELINE / "run.py")
    assert not any(m.startswith(("pipeline.executors", "ray", "mlflow")) for m in imported)
    assert "tracker.start" not in (PIPELINE / "run.py").read_text()  # the tracker subscribes to the run's events


def test_the_graph_writes_no_state_prints_nothing_and_logs_nothing():
    for path in (PIPELINE / "graph").rglob("*.py"):
        imported = _imported(path)
        assert not any(m.startswith(("pipeline.tracking", "pipeline.report")) for m in imported), path
        assert "pipeline.store.write_state" not in imported, path


def test_planning_reads_a_plan_input_not_the_settings():
    from pipeline.planning.planner import make_plan

    assert list(inspect.signature(make_plan).parameters) == ["given"]
    for path in (PIPELINE / "planning").glob("*.py"):
        # the time budget's hpo choice and the busy machine's cap on a fit's CPUs are steps on the settings,
        # before planning
        if path.name not in ("budget.py", "busy_box.py"):
            assert not any(m.startswith("pipeline.settings") for m in _imported(path)), path


def test_a_plan_from_a_hand_made_input_is_the_plan_of_the_settings(compose):
    from pipeline.hardware import Machine
    from pipeline.planning.planner import make_plan
    from pipeline.planning.inputs import DataInput, Levels, ModelInput, PlanInput
    from pipeline.resources import Request
    from pipeline.settings import read_settings

    settings = read_settings(compose(["model=lightgbm", "parallelism.num_folds=4", "hpo=random", "hpo.num_trials=3"]))
    given = PlanInput(
        models=(ModelInput(settings.models[0], 3),),
        levels=Levels(4, Request(), Request(), settings.levels.bag_memory, settings.levels.fit_memory),
        data=DataInput(None, 0.2, 0.2), machine=Machine(8),
    )
    (allocation,) = make_plan(given).allocations
    (from_settings,) = make_plan(settings.plan_input(machine=Machine(8))).allocations
    assert dataclasses.replace(from_settings, memory=None) == allocation  # the hand-made input has no data shape
    assert (allocation.num_folds, allocation.num_trials, allocation.folds_parallel) == (4, 3, 4)


def _config_objects(value, found=None) -> dict:
    """Every config dataclass object reachable from `value`, by id, with a copy of its attributes
    (fields and anything set on it besides)."""
    found = {} if found is None else found
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if id(value) not in found:
            found[id(value)] = (value, copy.deepcopy(vars(value)))
            for item in vars(value).values():
                _config_objects(item, found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _config_objects(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _config_objects(item, found)
    return found


def test_reading_and_planning_change_no_config_object(compose, monkeypatch, tmp_path):
    """The checks return what they derive (the seeds a null inherits, a device lower-cased, parsed
    resources) as new values, and the data source is a value of its own: the dataclasses OmegaConf
    built, and those the settings hold, are as they were built through checking, planning and loading."""
    from pipeline import settings as settings_module
    from pipeline.checks import check
    from pipeline.hardware import Machine
    from pipeline.planning.planner import make_plan, placed
    from pipeline.run import Runtime, load_data

    built = {}
    typed = settings_module.typed

    def keep(cfg, schema):
        conf = typed(cfg, schema)
        built["conf"], built["as_built"] = conf, copy.deepcopy(conf)
        return conf

    monkeypatch.setattr(settings_module, "typed", keep)
    settings = settings_module.read_settings(compose(["model=lightgbm", "model.lightgbm.device=CPU",
                                                      "model.lightgbm.resources.num_cpus=1", "seed=7",
                                                      "data.max_rows=400"]))
    before = _config_objects([built["conf"], settings.conf, settings.models])
    checked = check(settings, tmp_path)
    plan = make_plan(settings.plan_input(tmp_path, machine=Machine(2)))
    placed(settings.models, plan)
    (tmp_path / "run").mkdir()
    load_data(settings, Runtime(tmp_path / "run", tmp_path), checked)
    changed = [type(obj).__name__ for obj, attributes in before.values() if vars(obj) != attributes]
    assert changed == []
    assert built["conf"] == built["as_built"]
    assert built["conf"].hpo.seed is None and built["conf"].model["lightgbm"].device == "CPU"
    assert settings.conf.hpo.seed == settings.conf.data.seed == 7
    assert settings.models[0].conf.device == "cpu" and settings.models[0].resources.num_cpus == 1


class _Tracker:
    enabled, failure = True, None

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, args))


def test_the_time_budget_summary_reaches_the_console_the_state_file_and_the_tracker(tmp_path, capsys):
    from pipeline.graph.time_budget import BudgetSummary
    from pipeline.outputs import HookList, RunRecord
    from pipeline.report import ConsoleHooks
    from pipeline.tracking.hooks import TrackingHooks

    summary = BudgetSummary(limit_s=5.0, fits_ended_s=4.0, trials=3, trials_not_run=1, trials_dropped=0, fits=3,
                            fits_not_run=1, fits_stopped=1, key="fit_time_limit_s")
    tracker = _Tracker()
    HookList(ConsoleHooks(), RunRecord(tmp_path), TrackingHooks(tracker)).on_time_budget(summary)
    assert json.loads((tmp_path / "run_state.json").read_text())["time_budget"]["line"] == summary.line()
    assert tracker.calls[0] == ("set_tags", ({"pipeline.time_limit": summary.line()},))
    assert tracker.calls[1][0] == "log_metrics" and tracker.calls[1][1][0]["time_limit/fits_stopped"] == 1.0
    assert "1 of 3 trials not run" in capsys.readouterr().out
