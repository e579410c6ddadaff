"""The one worker pool: workers bound to a key's environment, reused, detected dead, stopped by escalation."""

from __future__ import annotations

import os
import signal
import time

import pytest

from pipeline.executors.pool import Died, WorkerPool


@pytest.fixture
def pool():
    pool = WorkerPool("spawn", os.getenv, detach=True, max_idle=4, name="test-worker")
    yield pool
    pool.shutdown(grace=2.0)


def ask(pool, env, message, timeout=60):
    worker = pool.submit(env, message)
    ((done, answer),) = pool.wait([worker], timeout)
    assert done is worker
    return worker, answer


def test_a_worker_serves_only_the_environment_it_started_with(pool):
    w0, seen0 = ask(pool, {"CUDA_VISIBLE_DEVICES": "0"}, "CUDA_VISIBLE_DEVICES")
    w1, seen1 = ask(pool, {"CUDA_VISIBLE_DEVICES": "1"}, "CUDA_VISIBLE_DEVICES")
    again, seen_again = ask(pool, {"CUDA_VISIBLE_DEVICES": "0"}, "CUDA_VISIBLE_DEVICES")
    assert (seen0, seen1, seen_again) == ("0", "1", "0")
    assert w0 is not w1 and again is w0  # the idle worker that sees device 0 took the next work for device 0
    hidden, seen_hidden = ask(pool, {"CUDA_VISIBLE_DEVICES": None}, "CUDA_VISIBLE_DEVICES")
    assert seen_hidden is None and hidden not in (w0, w1)


def test_an_idle_worker_that_died_is_replaced(pool):
    worker, _ = ask(pool, {}, "HOME")
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.join(10)
    fresh, _ = ask(pool, {}, "HOME")
    assert fresh is not worker and fresh.process.is_alive()
    assert pool.idle == [fresh]  # the dead one is no longer kept


def test_a_worker_killed_while_busy_is_died_with_its_signal():
    pool = WorkerPool("spawn", time.sleep, detach=True, name="test-sleeper")
    try:
        worker = pool.submit({}, 60)
        assert pool.wait([worker], 0.5) == []
        os.kill(worker.process.pid, signal.SIGKILL)
        ((_, answer),) = pool.wait([worker], 30)
        assert isinstance(answer, Died) and answer.reason == "killed by signal SIGKILL"
    finally:
        pool.shutdown(grace=1.0)


def stubborn_sleep(seconds: float) -> None:
    """A fit that ignores SIGTERM (a library that swallows it, a stuck collective)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(seconds)


def test_stop_escalates_to_sigkill_for_a_worker_that_does_not_stop():
    pool = WorkerPool("spawn", stubborn_sleep, detach=True, name="test-stubborn")
    idle, _ = ask(pool, {"SLOT": "a"}, 0)  # started, served, idle
    stubborn, _ = ask(pool, {"SLOT": "b"}, 0)  # from now on it ignores SIGTERM
    busy = pool.submit({"SLOT": "b"}, 60)
    assert busy is stubborn and pool.wait([busy], 0.5) == []
    pool.shutdown(grace=1.0)
    assert busy.process.exitcode == -signal.SIGKILL  # killed in its 60 s sleep, not waited for
    assert idle.process.exitcode == 0  # asked to exit, it did


def fitted_weights(n: int):
    """What a network's fit answers with: tensors (imported here, as a worker imports torch for a fit)."""
    import torch

    return {"weight": torch.arange(float(n)), "bias": torch.ones(2)}


def test_tensors_come_back_as_plain_pickled_bytes_not_shared_memory():
    # torch registers reductions with multiprocessing's pickler: sent through it, each tensor would
    # arrive as a shared-memory segment whose fd the driver fetches over a socket, one per tensor
    pool = WorkerPool("spawn", fitted_weights, detach=True, name="test-tensors")
    try:
        _, answer = ask(pool, {"SLOT": "a"}, 5)
    finally:
        pool.shutdown(grace=2.0)
    assert answer["weight"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert not any(t.is_shared() for t in answer.values())


def test_the_driver_imports_the_model_libraries_while_the_workers_start(tmp_path, monkeypatch):
    """The driver unpickles the models the workers send: it imports their libraries in a thread as the
    workers start, so the first result of each kind does not stall the scheduler on an import. It
    imports the packages only, not the modules the workers preload for the fits themselves."""
    import sys

    from pipeline.executors.local import ProcessBackend

    package = tmp_path / "library_for_the_driver"
    package.mkdir()
    (package / "__init__.py").write_text("import time\ntime.sleep(0.2)\n")
    (package / "fit_only.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ProcessBackend, "_start", lambda self, plan: None)  # no forkserver here
    backend = ProcessBackend(None, tmp_path, preload=("no_such_library_here", "library_for_the_driver.fit_only"))
    backend.start(None)
    backend.importing.join(10)
    assert "library_for_the_driver" in sys.modules  # a module that fails to import does not stop the rest
    assert "library_for_the_driver.fit_only" not in sys.modules
    backend.shutdown()


def test_fits_in_the_driver_find_what_they_import_on_first_use_imported_ahead(tmp_path, monkeypatch):
    """In the driver the fits run in the driver's own process: it imports, while the data loads, the
    libraries and what their fits import on first use (torch's optimizer: torch._dynamo, a second that
    would count against the first network fit and its time estimate), not the engine's own modules."""
    import sys

    from pipeline.executors import local

    package = tmp_path / "library_for_fits_in_the_driver"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "fit_only.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    asked = []
    real = local.import_in_background
    monkeypatch.setattr(local, "import_in_background", lambda modules: asked.append(modules) or real(modules))
    backend = local.InProcessBackend(preload=("pipeline.executors.lean_preload", "library_for_fits_in_the_driver",
                                              "library_for_fits_in_the_driver.fit_only"))
    backend.importing.join(10)
    assert asked == [("library_for_fits_in_the_driver", "library_for_fits_in_the_driver.fit_only")]
    assert "library_for_fits_in_the_driver.fit_only" in sys.modules


def test_workers_preload_what_a_network_fit_imports_on_first_use(compose):
    """torch's optimizer imports torch._dynamo when first used (a second): the workers import it ahead."""
    from pipeline.settings import read_settings

    settings = read_settings(compose(["model=all"]))
    assert settings.library_modules == ("lightgbm", "xgboost", "torch")
    assert settings.worker_modules == ("pipeline.executors.lean_preload", "lightgbm", "xgboost", "torch",
                                       "torch._dynamo")


def test_an_answer_keeps_the_bytes_it_came_in(pool):
    """The result store writes a fit's answer as the worker pickled it: the pool keeps the bytes beside the
    answer it unpickled."""
    import pickle

    worker, answer = ask(pool, {"X": "value"}, "X")
    assert answer == "value" and pickle.loads(worker.answer_bytes) == "value"


def modules_the_data_file_imports(path_and_fingerprint: tuple[str, str]) -> list[str]:
    """In a worker: the modules reading the run's data file imports, where the forkserver had not."""
    import sys

    from pipeline.graph.datafile import read_data_file

    before = set(sys.modules)
    read_data_file(*path_and_fingerprint)
    return sorted(set(sys.modules) - before)


def test_a_new_workers_first_fit_reads_the_data_with_what_the_forkserver_imported(adult, tmp_path):
    """Reading the data file imports the table's modules (pipeline.data, pandas, Hydra's config classes:
    about 0.5 s on the idle 2-core box): the forkserver imports them once, so no new worker's first fit, a retried
    fit's included, pays for them inside executor.task_timeout_s."""
    from pipeline.executors.local import WORKER_MODULES
    from pipeline.graph.datafile import write_data_file

    path = tmp_path / "data.pkl"
    write_data_file(path, adult)
    pool = WorkerPool("forkserver", modules_the_data_file_imports, detach=True, preload=WORKER_MODULES,
                      name="test-reader")
    try:
        _, imported = ask(pool, {}, (str(path), adult.fingerprint))
    finally:
        pool.shutdown(grace=2.0)
    assert not [m for m in imported if m.split(".")[0] in ("pandas", "pipeline", "hydra", "omegaconf")], imported
