"""Stop signals around a run (pipeline.signals): the first stops it, later ones never kill it mid-exit."""

import os
import signal

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
