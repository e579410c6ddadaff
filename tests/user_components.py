"""A user's own executor and tracker, plugged in by `_target_` (with allowed_targets=[tests.])."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.graph.backend import Backend
from pipeline.graph.tasks import DataRef, safe_run_fit
from pipeline.models import LightGBMModel
from pipeline.tracking import NullTracker


class InlineBackend(Backend):
    """Fits each task in the driver as it is submitted, and notes its id in the run directory."""

    name = "inline"

    def __init__(self, conf, plan, run_dir: Path, preload=()):
        self.log = Path(run_dir) / "inline_fits.jsonl"
        self.done: dict[int, object] = {}
        self.max_retries = conf.max_retries  # the typed executor settings arrive as `conf`

    def prepare(self, plan, data) -> DataRef:
        return DataRef(obj=data)

    def submit(self, request):
        request.local_gpus = ()
        handle = len(self.done)
        self.done[handle] = safe_run_fit(request)
        with self.log.open("a") as fh:
            fh.write(json.dumps({"task": request.task_id, "max_retries": self.max_retries}) + "\n")
        return handle

    def wait(self, handles, timeout=None):
        return [(h, self.done.pop(h)) for h in handles if h in self.done]


class RecordingTracker(NullTracker):
    """Writes each call it gets to recorded_tracking.jsonl in the launch directory."""

    enabled = True

    def __init__(self, conf, launch_dir: Path, sweep_dir=None):
        self.path = Path(launch_dir) / "recorded_tracking.jsonl"
        self.experiment = conf.experiment

    def _note(self, call: str, **values) -> None:
        with self.path.open("a") as fh:
            fh.write(json.dumps({"call": call, **values}, default=str) + "\n")

    def connect(self) -> None:
        self._note("connect", experiment=self.experiment)

    def start(self, run_name, params, tags) -> None:
        self.run_id = "recorded-run"
        self._note("start", run_name=run_name, params=sorted(params))

    def log_metrics(self, metrics, step=None) -> None:
        self._note("log_metrics", keys=sorted(metrics))

    def end(self, status) -> None:
        self._note("end", status=status)


class GatedTracker(NullTracker):
    """A tracker for TrackerClient that connects only once the file `gate` exists, then notes the size
    of each params blob it logs in `path` (its process reads no call before the gate opens)."""

    enabled = True
    uri = "sqlite:///never-opened.db"
    sweep_dir = None
    log_models = False

    def __init__(self, gate: Path, path: Path):
        self.gate, self.path = Path(gate), Path(path)

    def prepare(self) -> None: ...

    def connect(self) -> None:
        import time

        deadline = time.monotonic() + 300
        while not self.gate.exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    def start(self, run_name, params, tags) -> None:
        self.run_id = "gated-run"

    def log_params(self, params) -> None:
        with self.path.open("a") as fh:
            fh.write(f"{len(params['blob'])}\n")

class MyLightGBM(LightGBMModel):
    """A user's own model class built on the engine's LightGBM model (it might use lightgbm's
    scikit-learn estimators, so its run imports the libraries as they are)."""


class LeanProbeLightGBM(LightGBMModel):
    """The engine's LightGBM model that notes, in the fitted model, whether the process that fitted it had
    pipeline.lean_imports installed."""

    def _fit_rows(self, X, y, train_rows, val_rows, ctx) -> None:
        from pipeline import lean_imports

        super()._fit_rows(X, y, train_rows, val_rows, ctx)
        self.lean_installed_ = lean_imports.installed()
