"""The tracker's process serves a run's calls in order and prepares model logging (MLflow's pyfunc
import and its map of installed packages, half a second) in the first moment no call waits after the
run has started, so the model logged at the end does not pay for it."""

import threading
import time
from multiprocessing import Pipe

from pipeline.tracking.protocol import serve_run


class _Tracker:
    """Records each call; `start` gives the run an id, as MLflow's does."""

    def __init__(self):
        self.calls, self.run_id, self.failure = [], None, None

    def connect(self):
        self.calls.append("connect")

    def start(self, run_name, params, tags):
        self.calls.append("start")
        self.run_id = "run-1"

    def log_params(self, params):
        self.calls.append("log_params")

    def log_predictor(self, name, payload, example):
        self.calls.append("log_predictor")
        return f"models:/{name}"

    def prepare_model_logging(self):
        self.calls.append("prepare_model_logging")

    def end(self, status):
        self.calls.append("end")


def test_model_logging_is_prepared_once_no_call_waits_even_when_calls_queued_behind_the_start():
    driver, process_end = Pipe()
    tracker = _Tracker()
    serving = threading.Thread(target=serve_run, args=(process_end, tracker), daemon=True)
    # The run sends its start and, at once, more calls: they wait in the pipe while the start is served.
    driver.send(("start", ("run", {}, {}), {}))
    driver.send(("log_params", ({"a": 1},), {}))
    serving.start()
    assert driver.recv()[1] == "run-1"  # start's answer carries the run id
    deadline = time.monotonic() + 120  # the run fits now, and sends nothing until its model is ready (a hang guard)
    while "prepare_model_logging" not in tracker.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    driver.send(("log_predictor", ("lightgbm", b"payload", None), {}))
    driver.send(("end", ("FINISHED",), {}))
    driver.recv()
    serving.join(10)
    calls = tracker.calls
    assert calls.count("prepare_model_logging") == 1
    assert calls.index("log_params") < calls.index("prepare_model_logging") < calls.index("log_predictor")
