"""MLflow tracking in its own process: calls logged in order, a store that cannot open reported (at
once where the path says so, else when the process answers), a dead driver's run closed, models
logged without their library, the process below the fits in priority."""

import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import pipeline
from pipeline.errors import TrackingError
from pipeline.tracking.client import TrackerClient
from pipeline.tracking.mlflow_run import MlflowTracker
from pipeline.tracking.store import Store


def _client(uri):
    import mlflow

    return mlflow.MlflowClient(uri)


def test_a_sqlite_store_under_a_file_is_refused_at_connect(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    tracker = TrackerClient(MlflowTracker(Store(f"sqlite:///{blocker / 'mlflow.db'}"), "exp"))
    with pytest.raises(TrackingError, match="cannot open the MLflow store: .* is a file"):
        tracker.connect()  # in this process, before any process starts


def test_a_store_that_cannot_open_fails_at_the_poll_after_it_answers(tmp_path):
    garbage = tmp_path / "mlflow.db"
    garbage.write_bytes(b"not a database, " * 64)
    tracker = TrackerClient(MlflowTracker(Store(f"sqlite:///{garbage}"), "exp"))
    tracker.connect()
    tracker.start("a run", {}, {})  # not waited for
    deadline = time.time() + 120
    with pytest.raises(TrackingError, match="cannot open the MLflow store"):
        while time.time() < deadline:
            assert tracker.poll() is None  # no run id while the process has not answered
            time.sleep(0.1)
    with pytest.raises(TrackingError, match="cannot open the MLflow store"):
        tracker.run_id
    tracker.end("FAILED")  # returns: the process has nothing left to do


def test_the_process_runs_below_the_fits_in_priority(tmp_path):
    import os

    from pipeline.tracking.protocol import NICENESS

    tracker = TrackerClient(MlflowTracker(Store(f"sqlite:///{tmp_path / 'mlflow.db'}"), "exp"))
    tracker.connect()
    try:
        own = os.getpriority(os.PRIO_PROCESS, 0)
        deadline = time.time() + 60
        while os.getpriority(os.PRIO_PROCESS, tracker._process.pid) == own and time.time() < deadline:
            time.sleep(0.05)
        assert os.getpriority(os.PRIO_PROCESS, tracker._process.pid) == min(own + NICENESS, 19)
    finally:
        tracker.end("FAILED")


def test_a_model_is_logged_from_its_payload_without_its_library(tmp_path):
    """The tracker's process logs a predictor it never unpickles: the model's library stays unimported
    there, and the logged model loads and predicts as the predictor does."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    script = textwrap.dedent(f"""
        import json, pickle, sys
        import mlflow
        from pipeline.tracking.mlflow_run import MlflowTracker
        from pipeline.tracking.models import ModelPayload
        from pipeline.tracking.store import Store
        payload = pickle.loads(sys.stdin.buffer.read())
        tracker = MlflowTracker(Store({uri!r}, __import__("pathlib").Path({str(tmp_path / "art")!r})), "exp")
        tracker.connect()
        tracker.start("a run", {{}}, {{}})
        uri = tracker.log_predictor("lightgbm", payload, payload.example)
        tracker.end("FINISHED")
        print(json.dumps({{"uri": uri, "failure": tracker.failure, "imported": "lightgbm" in sys.modules}}))
    """)
    import pandas as pd

    from pipeline.tracking.models import ModelPayload
    from tests.conftest import ROOT

    run_dir = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "pipeline", "model=lightgbm", "tracking=none", "data.max_rows=600",
                    "model.lightgbm.params.num_iterations=20", f"hydra.run.dir={run_dir}"],
                   cwd=tmp_path, check=True, capture_output=True, timeout=300)
    predictor = __import__("pickle").loads((run_dir / "predictors" / "lightgbm.pkl").read_bytes())
    example = pd.read_parquet(ROOT / "pipeline" / "datasets" / "adult.parquet").drop(columns="income").head(5)

    payload = ModelPayload.of(predictor, example)
    proc = subprocess.run([sys.executable, "-c", script], input=__import__("pickle").dumps(payload),
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    import json

    out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert out["failure"] is None and out["imported"] is False
    import mlflow

    mlflow.set_tracking_uri(uri)
    loaded = mlflow.pyfunc.load_model(out["uri"])
    assert list(loaded.predict(example)) == list(predictor.predict(example))
    assert loaded.metadata.signature is not None


@pytest.mark.parametrize("leaving, code", [("time.sleep(1); os._exit(9)", 9), ("raise SystemExit(3)", 3)], ids=["dies", "raises"])
def test_a_driver_that_leaves_without_ending_its_run_leaves_it_failed(tmp_path, leaving, code):
    """Killed, or raising past `end`: the tracker's process ends the run FAILED. It ignores SIGTERM, and
    multiprocessing joins it at exit, so a driver that raises closes the run's connection first (after
    the calls it made are written) and does not hang. (A killed driver loses the calls its sender
    thread had not written yet: the killed one here waits a second for them.)"""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    script = textwrap.dedent(f"""
        import os
        import time
        from pipeline.tracking.client import TrackerClient
        from pipeline.tracking.mlflow_run import MlflowTracker
        from pipeline.tracking.store import Store
        if __name__ == "__main__":
            t = TrackerClient(MlflowTracker(Store({uri!r}), "exp"))
            t.connect()
            t.start("doomed", {{}}, {{}})
            t.log_metrics({{"loss": 0.5}})
            print(t.run_id, flush=True)
            {leaving}
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr  # it exited: no hang on the tracker's process
    run_id = proc.stdout.strip().splitlines()[-1]
    deadline = time.time() + 60
    while time.time() < deadline and _client(uri).get_run(run_id).info.status == "RUNNING":
        time.sleep(0.5)
    run = _client(uri).get_run(run_id)
    assert run.info.status == "FAILED" and run.data.metrics == {"loss": 0.5}


def test_a_call_is_not_waited_for_while_the_process_is_busy(tmp_path):
    """A call larger than the pipe's buffer (a model's payload) returns while the tracker's process
    has not even connected (it waits for a gate the test opens only afterwards); what the run changes
    afterwards is not what is logged."""
    from tests.user_components import GatedTracker

    gate = tmp_path / "gate"
    tracker = TrackerClient(GatedTracker(gate, tmp_path / "logged.txt"))
    tracker.connect()
    tracker.start("a run", {}, {})
    params = {"blob": "x" * 8_000_000}
    tracker.log_params(params)  # returns with the process blocked before its first read
    assert tracker.poll() is None and not (tmp_path / "logged.txt").exists()
    params["blob"] = "changed"
    gate.touch()
    tracker.end("FINISHED")
    assert tracker.failure is None and tracker.run_id == "gated-run"
    assert (tmp_path / "logged.txt").read_text() == "8000000\n"


def test_a_model_logged_under_a_run_with_many_metrics_reads_none_of_their_histories(tmp_path, monkeypatch):
    """MLflow's log_model, under an active run, reads every metric's history to link those at the model's
    step (one query per metric per model: quadratic in the models of a run); the tracker logs the model
    outside the run and links it to the run's outputs itself: no history read, the same model as before
    (the run's source, params and tags, READY, at MODEL_STEP in the run's outputs, its own scores)."""
    import mlflow
    import numpy as np
    import pandas as pd
    from mlflow.entities import LoggedModelStatus, Metric
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from pipeline.tracking.models import MODEL_STEP, ModelPayload

    tracker = MlflowTracker(Store(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "art"), "exp")
    tracker.connect()
    tracker.start("a run", {"model": "lightgbm", "seed": 0}, {"mlflow.source.name": "pipeline"})
    client = mlflow.MlflowClient(tracker.uri)
    client.log_batch(tracker.run_id, metrics=[Metric(f"m{k}/curve", 0.5, 0, step) for k in range(120)
                                              for step in range(3)])
    reads = []
    for method in ("get_metric_history", "get_run"):  # reading the run reads every metric's latest value
        original = getattr(SqlAlchemyStore, method)
        monkeypatch.setattr(SqlAlchemyStore, method,
                            lambda self, *a, _name=method, _original=original, **kw:
                            reads.append(_name) or _original(self, *a, **kw))
    example = pd.DataFrame({"x": [1.0, 2.0, 3.0]})
    payload = ModelPayload(pickle.dumps({"not": "loaded here"}), (), example, np.array([0, 1, 0]))
    uri = tracker.log_predictor("lightgbm", payload, example, {"lightgbm/val_roc_auc": 0.9})
    run_id = tracker.run_id
    assert tracker.failure is None and reads == []
    tracker.end("FINISHED")

    model = client.get_logged_model(uri.removeprefix("models:/"))
    assert (model.name, model.source_run_id, model.status) == ("lightgbm", run_id, LoggedModelStatus.READY)
    assert model.params == {"model": "lightgbm", "seed": "0"}
    assert model.tags["mlflow.source.name"] == "pipeline"
    assert [m.key for m in model.metrics] == ["lightgbm/val_roc_auc"]
    outputs = client.get_run(run_id).outputs.model_outputs
    assert [(o.model_id, o.step) for o in outputs] == [(model.model_id, MODEL_STEP)]


def test_a_model_whose_logging_fails_before_mlflow_takes_it_leaves_no_logged_model(tmp_path):
    """A requirement that cannot be pinned (its distribution is not installed) fails the model's log, as
    before; no logged model is left PENDING in the store for it."""
    import mlflow
    import numpy as np
    import pandas as pd

    from pipeline.tracking.models import ModelPayload

    tracker = MlflowTracker(Store(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "art"), "exp")
    tracker.connect()
    tracker.start("a run", {}, {})
    example = pd.DataFrame({"x": [1.0, 2.0]})
    payload = ModelPayload(b"not loaded here", (("no-such-distribution",),), example, np.array([0, 1]))
    assert tracker.log_predictor("lightgbm", payload, example) is None
    tracker.end("FINISHED")
    assert "PackageNotFoundError" in tracker.failure
    client = mlflow.MlflowClient(tracker.uri)
    assert list(client.search_logged_models([tracker.experiment_id])) == []


def test_the_engine_code_a_model_ships_is_its_imports_copied_once_per_process_privately():
    import shutil
    import stat

    from pipeline.tracking.shipped_code import engine_code, import_closure

    needs = {"pipeline.ensemble", "pipeline.models.xgboost", "pipeline.schema"}
    code = engine_code(needs)
    assert engine_code(needs) == code  # each model's log copies it into its own folder: one copy here
    root = code.parent.parent
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and root.stat().st_uid == os.getuid()
    shipped = {str(p.relative_to(code.parent).with_suffix("")).replace("/", ".").removesuffix(".__init__")
               for p in code.rglob("*.py")}
    assert shipped == set(import_closure(needs)) and needs | {"pipeline.trusted"} <= shipped
    assert (code / "models" / "xgboost_costs.yaml").is_file()  # package data beside a shipped module
    assert "pipeline.run" not in shipped and not list(code.rglob("*.parquet"))
    assert not (code / "conf").exists()
    assert engine_code({"pipeline.models.linear"}) != code  # another closure, another copy
    shutil.rmtree(root)  # a temporary folder cleaned up under a long-lived process: made again
    assert engine_code(needs).is_dir()


NOBODY = 65534


@pytest.mark.parametrize("scene", ["engine-installed", "shipped-code-only", "planted-by-another-user",
                                   "planted-in-the-working-directory"])
def test_a_process_that_loaded_a_model_imports_what_it_did_not_ship_from_an_installed_engine(scene, tmp_path):
    """MLflow puts a loaded model's code folder first on `sys.path`, so its partial copy stands for the
    package in that process: the modules it does not hold come from an installed engine, where there is
    one, and never from a `pipeline` folder another user could have written, nor from the working
    directory's."""
    from pipeline.testing.shipped_code_check import WITHOUT_ENGINE
    from pipeline.tracking.shipped_code import engine_code

    code = engine_code({"pipeline.ensemble", "pipeline.models.xgboost"})
    assert not (code / "run.py").exists()
    planted = tmp_path / "planted"
    (planted / "pipeline").mkdir(parents=True)
    for name in ("__init__.py", "run.py"):
        (planted / "pipeline" / name).write_text("print('PLANTED')\n")
    if scene == "planted-by-another-user":
        for path in (planted, planted / "pipeline", *(planted / "pipeline").iterdir()):
            os.chown(path, NOBODY, NOBODY)
    script = (WITHOUT_ENGINE if scene != "engine-installed" else "import sys\n") + textwrap.dedent(f"""
        if {scene == "planted-by-another-user"}:
            sys.path.insert(0, {str(planted)!r})
        if {scene == "planted-in-the-working-directory"}:
            sys.path.insert(0, "")
        sys.path.insert(0, {str(code.parent)!r})
        import pipeline.ensemble
        print(pipeline.ensemble.__file__)
        import pipeline.run
        print(pipeline.run.__file__)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=planted)
    files = proc.stdout.split()
    assert files[0] == str(code / "ensemble.py") and "PLANTED" not in proc.stdout
    if scene == "engine-installed":
        assert proc.returncode == 0, proc.stderr
        assert files[1] == str(Path(pipeline.__file__).parent / "run.py")
    else:
        assert proc.returncode == 1 and "No module named 'pipeline.run'" in proc.stderr
    if scene == "planted-by-another-user":
        assert f"{planted / 'pipeline'} (an engine found on the path" in proc.stderr
        assert f"belongs to uid {NOBODY}" in proc.stderr


def test_the_modules_a_pickle_names_are_read_without_loading_it():
    from pipeline.schema import FeatureSchema
    from pipeline.tracking.shipped_code import pickled_modules

    for protocol in (0, 2, pickle.HIGHEST_PROTOCOL):
        named = {"schema": FeatureSchema, "twice": [FeatureSchema, FeatureSchema], "path": Path}
        data = pickle.dumps(named, protocol)
        assert {"pipeline.schema", "pathlib"} <= pickled_modules(data), protocol


def test_a_tracker_process_leaving_at_once_removes_its_copy_of_the_engine_code(tmp_path):
    """A tracker's process leaves through `exit_now`, past the interpreter's atexit handlers: the copy of
    the engine code its models shipped went with it, so every tracked run left 1.5 MB in the temporary
    folder."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    script = textwrap.dedent("""
        from pipeline.tracking.protocol import exit_now
        from pipeline.tracking.shipped_code import engine_code
        print(engine_code(), flush=True)
        exit_now()
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(temporary)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(str(temporary))  # the copy was made there
    assert list(temporary.iterdir()) == []
