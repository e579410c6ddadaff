"""The GPU kit's call on a machine without CUDA: a step cut at the call's deadline keeps the groups it
finished (each written as soon as measured) and the rest are not measured with the reason; the processes
it started end with it. And the record of the box's OpenCL platforms and nvidia-smi modes."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from bench.device import box_info, calls

ROOT = Path(__file__).resolve().parents[2]

# The flagship step as the box runs it (bench.device.steps --only flagship), its whole-process runs replaced:
# Adult answers at once; the next data set starts a child process, then outlives the call's deadline.
CHILD = """
import os, subprocess, sys, time
from pathlib import Path
from bench.suites import fixed_cost
from bench.device import steps

def engine(self, args, env=None):
    return 0.1, self.cwd / "runs" / "warm-up"

def alternate(runner, variants, n, label, score, each=None):
    if "Adult" not in label:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(os.environ["KIT_TEST_PID_FILE"]).write_text(str(child.pid))
        time.sleep(600)
    return ({"gbm_gpu": [2.0] * n, "gbm": [5.0] * n}, {k: [0.93] * n for k in variants},
            {k: runner.cwd for k in variants})

fixed_cost.Runner.engine = engine
fixed_cost._alternate = alternate
sys.exit(steps.main(sys.argv[1:]))
"""


def _gone(pid: int, wait_s: float = 10) -> bool:
    end = time.time() + wait_s
    while time.time() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def test_a_step_cut_at_the_deadline_keeps_the_groups_it_finished(tmp_path, monkeypatch):
    monkeypatch.setattr(calls, "device_name", lambda: "Rehearsal GPU")  # the steps run as on a box
    monkeypatch.setattr(calls, "step_command", _child(CHILD))
    monkeypatch.setattr(calls, "MIN_START_S", 5)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("KIT_TEST_PID_FILE", str(tmp_path / "sleeper.pid"))
    manifest = {"commit": "test", "calls": [{"call": 1, "steps": ["flagship"]}]}
    t0 = time.time()
    path = calls.run_call(manifest, 1, tmp_path / "out", t0 + 12, tmp_path / "scratch")
    assert time.time() - t0 < 30
    result = json.loads(path.read_text())
    suite = result["suites"]["gpu"]
    assert suite["settings"]["steps"]["flagship"]["status"] == "cut"
    figures = {(f["group"], f["name"]): f for f in suite["figures"]}
    adult = figures[("gbm_gpu vs CPU · Adult", "speed-up whole process")]
    assert adult["values"] == [2.5, 2.5] and adult["device"] == "Rehearsal GPU"
    assert figures[("gbm_gpu vs CPU · Adult", "gbm best test ROC AUC")]["median"] == 0.93
    for name in ("synthetic 1M", "synthetic 4M"):
        cut = figures[(f"gbm_gpu vs CPU · {name}", "speed-up whole process")]
        assert cut["status"] == "not measured" and cut["reason"] == "failed: cut at the call's time limit"
    assert _gone(int((tmp_path / "sleeper.pid").read_text()))  # the step's own child was ended with it


# The network step with its measuring replaced: fp32's engine loop measured, then an error escapes the step.
FAILING = """
import sys
from bench.common import figure
from bench.device import steps
from bench.suites import nn_loop

def measure(opts, device, prefix, name, emit=None):
    emit([figure("engine loop rows/s", [1.2e6, 1.3e6], "rows/s", group=f"{prefix} · fp32")])
    raise RuntimeError("CUDA error: out of memory")

nn_loop.measure = measure
sys.exit(steps.main(sys.argv[1:]))
"""


def _child(script: str):
    def command(step, lines, scratch, device):
        args = ["--only", step, "--json", str(lines), "--scratch", str(scratch), "--device", device or ""]
        return [sys.executable, "-c", script, *args]

    return command


def test_a_step_that_fails_keeps_what_it_measured_and_records_the_error(tmp_path, monkeypatch):
    monkeypatch.setattr(calls, "step_command", _child(FAILING))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    figures, _, status = calls.run_step("network", tmp_path, "Rehearsal GPU", 120)
    assert status == "failed"
    by_name = {(f["group"], f["name"]): f for f in figures}
    assert by_name[("network on CUDA · fp32", "engine loop rows/s")]["median"] == 1.25e6
    left = by_name[("network on CUDA · bf16-mixed", "engine loop rows/s")]
    assert left["reason"] == "failed: exited 1: RuntimeError: CUDA error: out of memory"
    assert len(figures) == 8  # the step's planned figures, each once


def test_the_box_record_lists_opencl_platforms_and_the_persistence_mode(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat <<'EOF'\n==============NVSMI LOG==============\n\n"
                   "Driver Version                            : 580.95.05\n"
                   "CUDA Version                              : 13.0\n\n"
                   "Attached GPUs                             : 1\n"
                   "GPU 00000000:1A:00.0\n"
                   "    Product Name                          : NVIDIA H200\n"
                   "    Persistence Mode                      : Enabled\n"
                   "    Compute Mode                          : Default\n"
                   "    Clocks Event Reasons\n"
                   "        Persistence Mode                  : not this one\n"
                   "EOF\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path), os.environ["PATH"]]))
    assert box_info.nvidia_smi() == [{"Driver Version": "580.95.05", "CUDA Version": "13.0",
                                      "bus_id": "00000000:1A:00.0", "Product Name": "NVIDIA H200",
                                      "Persistence Mode": "Enabled", "Compute Mode": "Default"}]
    record = box_info.in_a_child()
    platforms = record["opencl_platforms"]
    if isinstance(platforms, str):  # no OpenCL loader or platform here: the record says why
        assert platforms.startswith("no OpenCL")
    else:
        assert [p["index"] for p in platforms] == list(range(len(platforms)))
        for device in (d for p in platforms for d in p["devices"]):
            assert device["type"] in {"cpu", "gpu", "accelerator", "default", "custom"} and device["name"]
    assert isinstance(record["opencl_icd_files"], dict)
    assert record["nvidia_smi"][0]["Persistence Mode"] == "Enabled"  # the child sees the same PATH
