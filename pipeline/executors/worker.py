"""The worker process: takes its environment (its devices) first, then serves the messages on its pipe.

CUDA_VISIBLE_DEVICES is set before anything can import torch, xgboost or lightgbm, and a
worker is bound to one environment for its whole life: work for other devices gets another
worker, never this process's CUDA context. The same loop runs the local executor's fits and the
GPU launcher's sweep jobs; only the function that serves a message differs.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from typing import Any, Callable, Optional


def apply_env(env: dict[str, Optional[str]]) -> None:
    """Set the variables of `env` in this process; a None value removes the variable."""
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@contextlib.contextmanager
def environment(env: dict[str, Optional[str]]):
    """`env` set in this process for the block (apply_env), the previous values put back after it."""
    saved = {key: os.environ.get(key) for key in env}
    apply_env(env)
    try:
        yield
    finally:
        apply_env(saved)


def send(conn, obj: Any) -> None:
    """Send `obj` pickled by the standard pickler, not multiprocessing's: once torch is imported, that
    one moves every tensor through shared memory, each fd fetched back over its own authenticated
    socket from a thread of the sender (a fitted network's answer took 1.4 s instead of milliseconds)."""
    conn.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def worker_main(conn, env: dict[str, Optional[str]], serve: Callable[[Any], Any], detach: bool = True,
                preload: tuple[str, ...] = ()) -> None:
    """Serve `serve(message)` for each message until None or end-of-file, then `serve.close()` if it has one.

    detach: the worker leaves the driver's process group (Ctrl-C at the terminal does not reach it:
    the driver decides when it stops; stopping it stops what it started) and dies with the driver.
    Without it, a stop signal reaches the work as it reaches the driver.
    """
    apply_env(env)
    import importlib
    import signal

    if detach:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        os.setpgid(0, 0)
        _die_with_parent()

    for module in preload:  # the model libraries, imported before the first message arrives
        importlib.import_module(module)

    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, KeyboardInterrupt):
                return
            if message is None:
                return
            send(conn, serve(message))
    finally:
        close = getattr(serve, "close", None)
        if close is not None:  # what the served work keeps between messages (a warm tracker process)
            close()
        from pipeline.exiting import exit_quickly

        exit_quickly()  # the pool waits for its workers to exit


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
