"""Stop signals around a run (pipeline.signals): the first stops it, later ones never kill it mid-exit."""

import logging
import os
import signal
import sys
import time

import pytest

from pipeline.errors import Interrupted
from pipeline.signals import STOP_SIGNALS, StopSignals


@pytest.fixture
def own_handlers():
    """This process's handlers as they were, put back whatever the test leaves."""
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    yield before
    for sig, handler in before.items():
        signal.signal(sig, handler)


def test_a_block_left_by_a_stop_signal_leaves_later_ones_ignored(own_handlers):
    """Before, the block put the default handler back as it unwound: a SIGTERM repeated every 20 ms
    (a spot instance's) could land before the exit and kill the process by the signal (exit -15), not
    with the run's exit code."""
    with pytest.raises(Interrupted) as stopped:
        with StopSignals():
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pause()  # the handler raises as soon as the signal is delivered
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    assert [signal.getsignal(sig) for sig in STOP_SIGNALS] == [signal.SIG_IGN] * len(STOP_SIGNALS)
    os.kill(os.getpid(), signal.SIGTERM)  # ignored: this process goes on


def test_a_block_that_ends_otherwise_puts_the_previous_handlers_back(own_handlers):
    with StopSignals():
        assert signal.getsignal(signal.SIGTERM) is not own_handlers[signal.SIGTERM]
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == own_handlers
    with pytest.raises(ValueError):
        with StopSignals():
            raise ValueError("a failure that is not a stop signal")
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == own_handlers


def test_a_repeat_arriving_while_the_run_writes_its_log_cannot_re_enter_the_write(own_handlers):
    """Before, each repeat logged from the handler: a SIGTERM every 20 ms landed inside the previous
    line's write to stderr, the nested writes failed ("--- Logging error ---"), and an exception out of
    the handler replaced the stop, so the next SIGTERM killed the process (exit -15)."""
    import io

    signals = StopSignals()

    class SignalledStream(io.StringIO):
        """A log stream whose every write is interrupted by another SIGTERM, as a busy stderr is."""

        def write(self, text):
            signals._handle(signal.SIGTERM, None)
            return super().write(text)

    handler, errors = logging.StreamHandler(SignalledStream()), []
    handler.handleError = lambda record: errors.append(sys.exc_info()[1])  # what its write raised
    logger = logging.getLogger("pipeline")
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.WARNING
    try:
        with pytest.raises(Interrupted), signals:
            _stopped_then_signalled(signals, [signal.SIGTERM] * 3)
    finally:
        logger.removeHandler(handler)
        logger.level = level
    assert errors == []
    assert handler.stream.getvalue() == "3 stop signal(s) received during the run's clean-up: ignored until it ended\n"
    assert signals.repeats == 4  # the three, and one more inside the write of that line


def _stopped_then_signalled(signals: StopSignals, repeats: list[int]) -> None:
    """The first signal stops the block; the repeats land while it unwinds."""
    try:
        signals._handle(signal.SIGTERM, None)
    except Interrupted:
        for sig in repeats:
            signals._handle(sig, None)
        raise


def test_the_first_repeat_is_said_at_once_and_the_rest_counted(own_handlers, capfd):
    with pytest.raises(Interrupted):
        with StopSignals() as signals:
            _stopped_then_signalled(signals, [signal.SIGINT, signal.SIGTERM])
    err = capfd.readouterr().err
    assert err.count("received while the run stops") == 1
    assert "SIGINT received while the run stops: finishing the clean-up first (SIGKILL stops at once)" in err
    assert signals.repeats == 2


def _frame_of(filename: str):
    """A frame of code from `filename`: where the main thread was when a signal's handler ran."""
    namespace: dict = {}
    exec(compile("import sys\nframe = sys._getframe()", filename, "exec"), namespace)
    return namespace["frame"]


@pytest.mark.parametrize("where", ["<frozen importlib._bootstrap>", logging.__file__])
def test_a_stop_inside_the_import_machinery_or_a_log_call_is_raised_a_moment_later(own_handlers, where):
    """Before, the stop was raised wherever it landed: between `_imp.acquire_lock()` and the `try` that
    releases it, Python's import lock stayed held, and the plots' preload thread, importing matplotlib,
    hung the run for good (seen twice in 16 runs of a SIGTERM storm on a loaded box)."""
    deferred_at = None
    with pytest.raises(Interrupted) as stopped, StopSignals() as signals:
        signals._handle(signal.SIGTERM, _frame_of(where))  # returns: the stop is sent again shortly
        deferred_at = time.monotonic()
        time.sleep(5)  # the stop sent again lands here, in the run's own code, and is raised
    assert deferred_at is not None and time.monotonic() - deferred_at < 4
    assert stopped.value.exit_code == 128 + signal.SIGTERM and signals.repeats == 0


def test_a_stop_that_a_library_swallowed_is_raised_again_by_the_next_signal(own_handlers):
    """Before, the first stop made every later signal a repeat: caught by a bare `except` (the run went
    on), it left a run that no SIGTERM could stop."""
    with pytest.raises(Interrupted), StopSignals() as signals:
        try:
            signals._handle(signal.SIGTERM, None)
        except BaseException:  # noqa: BLE001 - what the library does
            pass
        signals._handle(signal.SIGTERM, None)
    assert signals.repeats == 0


def test_a_signal_during_the_clean_up_of_a_run_that_ended_is_a_repeat(own_handlers):
    with StopSignals() as signals:
        signals.clean_up()
        signals._handle(signal.SIGTERM, None)
    assert signals.repeats == 1
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == own_handlers
