"""The worker process: sees only its slot's GPUs, then fits whatever requests arrive on its pipe.

CUDA_VISIBLE_DEVICES is set before anything can import torch, xgboost or lightgbm, and a
worker is bound to one device set for its whole life: a task for other devices gets another
worker, never this process's CUDA context.
"""

from __future__ import annotations

import os


def worker_main(conn, env: dict[str, str], preload: tuple[str, ...] = ()) -> None:
    os.environ.update(env)
    import importlib
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when workers stop
    os.setpgid(0, 0)  # its own process group: stopping a fit stops the processes the fit started too
    _die_with_parent()

    from pipeline.executors.tasks import safe_run_fit

    for module in preload:  # the model libraries, imported before the first request arrives
        importlib.import_module(module)

    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        conn.send(safe_run_fit(request))


def _die_with_parent() -> None:
    """Linux: be killed when the forkserver exits, which it does when the driver dies (SIGKILL, OOM):
    no orphaned fit keeps writing into a run directory that a resumed run has taken over."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)

