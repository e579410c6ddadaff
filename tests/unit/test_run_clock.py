"""When a run started, for time_limit_s: the process's own start, to the clock tick."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_process_start_is_before_its_first_line_and_close_to_it():
    """A fresh interpreter's first statement runs tens of milliseconds after the process started; /proc/stat's
    btime, whole seconds, put the start up to a second earlier, which a time limit would count against the run."""
    code = ("import time; first = time.time(); import sys; sys.path.insert(0, sys.argv[1]); "
            "from pipeline.run_clock import process_started; print(first - process_started())")
    gaps = [float(subprocess.run([sys.executable, "-S", "-c", code, str(ROOT)], capture_output=True, text=True,
                                 check=True).stdout) for _ in range(3)]
    assert all(-0.02 <= gap < 0.3 for gap in gaps), gaps
