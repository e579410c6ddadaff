"""One call of the GPU kit on the box: its steps in order, each in a child process, into one results JSON.

`python -m bench.device.calls --call N --manifest M --out-dir DIR [--deadline EPOCH]` (what run.sh runs)
starts each step the manifest gives call N as `python -m bench.device.steps --only STEP` in a process
group of its own, under what is left of the call's time. The step appends each group's figures to a JSON
lines file as soon as they are measured; the call merges them into the results JSON after every step. A
step cut at the deadline (its whole process group killed: the engine runs and tests it started too) or
failing keeps the groups it finished, and its other planned figures are written as not measured, with
the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.device import steps
from bench.device.plan import BY_NAME
from bench.device.results import read_lines

CUT = "cut at the call's time limit"
MIN_START_S = 30  # a step starts with at least this much of the call left (or its whole estimate)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def device_name() -> str | None:
    from bench.common import cuda_device_name

    return cuda_device_name()


def new_result(manifest: dict, call: int, device: str | None) -> dict:
    from bench import common
    from bench.device import box_info

    return {
        "schema": 1,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "mode": "full",
        "command": f"bash bench/device/run.sh {call}",
        "kit": {"commit": manifest.get("commit"), "call": call, "calls": len(manifest["calls"])},
        "machine": common.machine(),
        "device": {
            "name": device or common.cpu_model(),
            "kind": "cuda" if device else "cpu",
            **box_info.in_a_child(),  # OpenCL platforms and devices, nvidia-smi's modes
        },
        "versions": common.versions(),
        "suites": {},
    }


def add(result: dict, step: str, figures: list[dict], seconds: float, status: str = "ok", **extra) -> None:
    suite = result["suites"].setdefault(
        steps.SUITE_OF.get(step, "gpu"),
        {"status": "ok", "settings": {}, "figures": [], "notes": [], "seconds": 0},
    )
    suite["figures"] += figures
    suite["seconds"] = round(suite["seconds"] + seconds, 1)
    record = {"status": status, "seconds": round(seconds, 1), **extra}
    suite["settings"].setdefault("steps", {})[step] = record
    if status != "ok":
        suite["notes"].append(f"step {step}: {status}")


def write(path: Path, result: dict) -> None:
    result["total_seconds"] = round(sum(s["seconds"] for s in result["suites"].values()), 1)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
    tmp.replace(path)


def step_command(step: str, lines: Path, scratch: Path, device: str | None) -> list[str]:
    return [sys.executable, "-m", "bench.device.steps", "--only", step, "--json", str(lines),
            "--scratch", str(scratch), "--device", device or ""]


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # none left
        pass


def run_step(step: str, scratch: Path, device: str | None, timeout: float) -> tuple[list, dict, str]:
    """The step's figures (what it finished, the rest as not measured), its settings and its status:
    ok, failed (it exited non-zero) or cut (still running at `timeout` seconds)."""
    lines = scratch / f"{step}.jsonl"
    lines.unlink(missing_ok=True)
    cmd = step_command(step, lines, scratch / step, device)
    proc = subprocess.Popen(cmd, start_new_session=True)  # its output goes to the call's log
    try:
        code = proc.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        code = None
    _kill_group(proc.pid)  # a cut step's children, and whatever a finished one left running
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    figures, settings, error = read_lines(lines)
    if code == 0:
        return figures, settings, "ok"
    status = "cut" if code is None else "failed"
    why = CUT if code is None else f"exited {code}" + (f": {error}" if error else "")
    return figures + steps.not_measured_all(step, f"failed: {why}", figures), settings, status


def run_call(manifest: dict, call: int, out_dir: Path, deadline: float, scratch: Path) -> Path:
    """The call's steps in order; returns the results JSON, named by time, device and call."""
    from bench.common import log

    out_dir.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    device = device_name()
    result = new_result(manifest, call, device)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    json_path = out_dir / f"{stamp}-gpu-{slug(device or 'no-cuda')}-c{call}.json"
    planned = next(c for c in manifest["calls"] if c["call"] == call)["steps"]
    write(json_path, result)
    for step in planned:
        left = deadline - time.time()
        estimate = BY_NAME[step].seconds
        if left < min(MIN_START_S, estimate):
            why = f"not started: {left:.0f} s left of the call, the step takes ~{estimate} s"
            add(result, step, steps.not_measured_all(step, why), 0, "skipped")
            write(json_path, result)
            continue
        log(f"call {call}: step {step} (~{estimate} s; {left:.0f} s left)")
        t0 = time.perf_counter()
        figures, settings, status = run_step(step, scratch, device, left)
        extra = {"settings": settings} if settings else {}
        add(result, step, figures, time.perf_counter() - t0, status, **extra)
        write(json_path, result)
    log(f"call {call}: wrote {json_path}")
    return json_path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.device.calls", description=__doc__.split("\n\n")[0])
    p.add_argument("--call", type=int, required=True)
    p.add_argument("--manifest", type=Path, required=True)
    p.add_argument("--out-dir", type=Path, required=True, help="the folder of the call's results JSON")
    p.add_argument("--deadline", type=float, default=None, help="epoch seconds by which the call must end")
    p.add_argument("--scratch", type=Path, default=None)
    args = p.parse_args(argv)
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="kit-"))
    manifest = json.loads(args.manifest.read_text())
    run_call(manifest, args.call, args.out_dir, args.deadline or time.time() + 480, scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
