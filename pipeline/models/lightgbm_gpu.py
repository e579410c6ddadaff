"""LightGBM's GPU learners: the build check, run where the fits run, and the device a fit used.

The check trains one round on 64 rows in a child process that sees exactly the device the
model's first fit was planned on (its CUDA_VISIBLE_DEVICES), so the driver never opens an
OpenCL or CUDA context, least of all on device 0 of a box whose fits run elsewhere.
The child runs `_main` (see PROBE).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from typing import Mapping, Optional

GPU_KEYS = ("device_type", "max_bin", "gpu_platform_id", "gpu_use_dp")  # what selects the kernels the probe builds
PROBE_TIMEOUT_S = 900  # an OpenCL runtime compiling its kernels for the first time (PoCL: ~40 s)
_DEVICE_LINE = re.compile(r"Using (?:GPU|CUDA) Device: ?(?P<name>[^,]+)(?:, Vendor: ?(?P<vendor>.+))?")

log = logging.getLogger("lightgbm")
PROBE = "import sys; from pipeline.models.lightgbm_gpu import _main; sys.exit(_main(sys.argv[1:]))"


def probe_params(params: dict) -> dict:
    """The model's parameters that decide which GPU kernels LightGBM builds and on which device (device 0
    unless `gpu_device_id` names another: the OpenCL GPU's index on its platform), for a one-round probe."""
    out = {k: params[k] for k in GPU_KEYS if k in params}
    out.update(verbosity=-1, num_iterations=1, objective="binary")
    out["gpu_device_id"] = params.get("gpu_device_id", 0)
    return out


def probe(params: dict, env: Mapping[str, str]) -> Optional[str]:
    """LightGBM's error for a GPU fit in a process with `env`, or None when it trains."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(probe_params(params))],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
    )
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stdout.splitlines() if line.strip()]  # the error; stderr has the runtime's noise
    lines = lines or [line for line in proc.stderr.splitlines() if line.strip()]
    return " ".join(line.strip() for line in lines) if lines else f"the probe exited with code {proc.returncode}"


class DeviceLog:
    """LightGBM's log as debug lines of the `lightgbm` logger (hydra.verbose=lightgbm shows them),
    remembering the device a GPU learner announced and its vendor (the OpenCL learner names both:
    PoCL's CPU device shows as a CPU vendor, an NVIDIA card as NVIDIA Corporation)."""

    def __init__(self):
        self.device: Optional[str] = None
        self.vendor: Optional[str] = None

    def info(self, message: str) -> None:
        match = _DEVICE_LINE.search(message)
        if match:
            self.device = match.group("name").strip()
            self.vendor = (match.group("vendor") or "").strip() or None
        log.debug(message.rstrip())

    def warning(self, message: str) -> None:
        log.debug(message.rstrip())


_DEVICE_LOG: Optional[DeviceLog] = None


def device_log() -> DeviceLog:
    """This process's DeviceLog, registered with LightGBM once."""
    global _DEVICE_LOG
    if _DEVICE_LOG is None:
        import lightgbm as lgb

        _DEVICE_LOG = DeviceLog()
        lgb.register_logger(_DEVICE_LOG)
    return _DEVICE_LOG


def log_from_this_thread() -> None:
    """Route the library's log lines of fits in this thread through its Python logger. The C library keeps
    its log callback per thread and registers it in the thread that imported `lightgbm`: a fit in
    another thread (the driver imports the libraries in a background thread) would print to stdout."""
    from lightgbm import basic

    basic._LIB.LGBM_RegisterLogCallback(basic._LIB.callback)


def _main(argv: list[str]) -> int:
    import numpy as np
    import lightgbm as lgb

    params = json.loads(argv[0])
    X = np.random.default_rng(0).random((64, 2))
    try:
        lgb.train(params, lgb.Dataset(X, X[:, 0] > 0.5))
    except lgb.basic.LightGBMError as exc:
        print(str(exc).strip())
        return 3
    return 0
