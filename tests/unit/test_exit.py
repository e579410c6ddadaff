"""The CLI's exit: what a run loaded is exempted from the collector, so the interpreter does not
traverse it all on the way out, whether the run returned or exited (errors, --help)."""

import gc
import sys

import pytest


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_entry_freezes_what_was_loaded_even_when_hydra_exits(unfrozen, monkeypatch):
    import pipeline.__main__ as cli

    monkeypatch.setattr(sys, "argv", ["pipeline", "--help"])
    assert gc.get_freeze_count() == 0
    with pytest.raises(SystemExit):
        cli.entry()
    assert gc.get_freeze_count() > 0


def test_a_pool_worker_freezes_what_it_loaded_before_it_exits(unfrozen):
    """The pool waits for its workers to exit (a sweep's end, a run's end): their teardown is short too."""
    import multiprocessing

    from pipeline.executors.worker import worker_main

    ours, theirs = multiprocessing.Pipe()
    ours.send("a message")
    ours.send(None)  # the pool's stop
    worker_main(theirs, {}, str.upper, detach=False)
    assert ours.recv() == "A MESSAGE"
    assert gc.get_freeze_count() > 0
