"""Models for the contract suites: they predict the training prior and record where they ran, sleep, or
fail. Worker processes and Ray tasks unpickle them, so they live in the package, not in a test module."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np

from pipeline.models.base import TabularModel


class PriorModel(TabularModel):
    """Predicts the training prior after sleeping `seconds` (0 by default); with `record_dir`, writes
    one JSON record per fit once it ends: its pid, CUDA_VISIBLE_DEVICES and its placement (gpu_ids,
    local_gpus); with `start_dir`, one as it starts."""

    library = "test"

    @classmethod
    def gpu_request(cls, params):
        return False, False, "params.device=cpu"

    def _fit(self, X, y, X_val, y_val, ctx):
        _record(self.params.get("start_dir"), ctx)
        time.sleep(float(self.params.get("seconds", 0)))
        if ctx.problem_type == "regression":
            self.prior_ = float(np.mean(y))
        else:
            self.prior_ = np.bincount(y, minlength=ctx.num_classes) / len(y)
        _record(self.params.get("record_dir"), ctx)

    def _predict(self, X):
        if np.isscalar(self.prior_):
            return np.full(len(X), self.prior_)
        return np.tile(self.prior_, (len(X), 1))


def _record(folder, ctx) -> None:
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        entry = {"pid": os.getpid(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                 "gpu_ids": list(ctx.placement.gpu_ids), "local_gpus": list(ctx.placement.local_gpus)}
        (Path(folder) / f"{os.getpid()}-{time.time_ns()}.json").write_text(json.dumps(entry))


class FailingModel(PriorModel):
    """Raises in every fit."""

    def _fit(self, X, y, X_val, y_val, ctx):
        raise RuntimeError("a fit that always fails")


class DieOnceModel(PriorModel):
    """The first fit (the one that creates the file `marker`) SIGKILLs its own process; later fits succeed."""

    def _fit(self, X, y, X_val, y_val, ctx):
        try:
            with open(self.params["marker"], "x"):
                pass
        except FileExistsError:
            return super()._fit(X, y, X_val, y_val, ctx)
        os.kill(os.getpid(), signal.SIGKILL)


def records(folder: Path) -> list[dict]:
    """What PriorModel's fits recorded in `folder`."""
    return [json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.json"))]
