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
    """When the driver dies however it dies (SIGKILL, the OOM killer), kill this worker's process
    group at once: no orphaned fit keeps writing into a run directory a resumed run has taken over.
    (The forkserver cannot do it: it waits for its clients, this worker among them.)"""
    import multiprocessing
    import signal
    import threading

    driver = multiprocessing.parent_process()  # the process that asked for this worker
    if driver is None:
        return

    def watch() -> None:
        driver.join()  # returns when the driver has exited
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="driver-watch", daemon=True).start()
