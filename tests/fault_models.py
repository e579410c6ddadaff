"""Models for fault injection and scheduling tests: they fail, crash, or sleep and record where they ran."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np

from pipeline.models.base import TabularModel


class _Constant(TabularModel):
    """Predicts the training prior; subclasses add the behaviour under test."""

    library = "test"

    @classmethod
    def gpu_request(cls, params):
        return False, False, "params.device=cpu"

    def _fit(self, X, y, X_val, y_val, ctx):
        if ctx.problem_type == "regression":
            self.prior_ = float(np.mean(y))
        else:
            self.prior_ = np.bincount(y, minlength=ctx.num_classes) / len(y)

    def _predict(self, X):
        if np.isscalar(self.prior_):
            return np.full(len(X), self.prior_)
        return np.tile(self.prior_, (len(X), 1))


class FailingModel(_Constant):
    """Raises in every fit."""

    def _fit(self, X, y, X_val, y_val, ctx):
        raise RuntimeError("injected failure")


class SleepModel(_Constant):
    """Sleeps `seconds` (or `seconds_by_job[job]`, with `job: ${hydra:job.num}` in a sweep), then records
    its pid, CUDA_VISIBLE_DEVICES and time span in `record_dir`."""

    def _fit(self, X, y, X_val, y_val, ctx):
        start = time.time()
        by_job = self.params.get("seconds_by_job")
        seconds = by_job[int(self.params["job"])] if by_job else self.params.get("seconds", 0.5)
        time.sleep(float(seconds))
        super()._fit(X, y, X_val, y_val, ctx)
        record_dir = self.params.get("record_dir")
        if record_dir:
            Path(record_dir).mkdir(parents=True, exist_ok=True)
            entry = {
                "pid": os.getpid(), "start": start, "end": time.time(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"),
                "local_gpus": list(ctx.placement.local_gpus), "device": ctx.placement.device,
                "gpu_ids": list(ctx.placement.gpu_ids), "num_cpus": ctx.placement.num_cpus,
            }
            (Path(record_dir) / f"{os.getpid()}-{time.time_ns()}.json").write_text(json.dumps(entry))


class KillOnceModel(_Constant):
    """The first fit SIGKILLs its own process (a worker killed mid-fit); later fits succeed."""

    def _fit(self, X, y, X_val, y_val, ctx):
        if _first(self.params["marker"], "killed"):
            os.kill(os.getpid(), signal.SIGKILL)
        super()._fit(X, y, X_val, y_val, ctx)


class NanModel(_Constant):
    """Predicts NaN everywhere (a diverged network, a broken custom model)."""

    def _predict(self, X):
        return np.full_like(np.asarray(super()._predict(X), dtype=np.float64), np.nan)


class HangOnceModel(_Constant):
    """The first fit hangs (sleeps an hour, as a stuck collective would); later fits succeed."""

    def _fit(self, X, y, X_val, y_val, ctx):
        if _first(self.params["marker"], "hung"):
            time.sleep(3600)
        super()._fit(X, y, X_val, y_val, ctx)


def _first(marker: str, text: str) -> bool:
    """True for the one fit that creates `marker`: concurrent fits (two slots starting at once) race
    for it, and exactly one wins."""
    try:
        with open(marker, "x") as fh:
            fh.write(text)
    except FileExistsError:
        return False
    return True

