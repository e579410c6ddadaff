"""How the kit's files and steps are laid out in calls: the files packed into calls under the size limit
(those above it in parts), each step placed in the first call whose files complete its needs and within a
call's time, and the manifest with its estimates and deadlines (manifest.json, MANIFEST.txt)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from bench.device.plan import (
    BASE,
    BUDGET_S,
    CALL_LIMIT_S,
    GAP_S,
    LGB_CUDA,
    LGB_OPENCL,
    PLAN_LIMIT_S,
    SETUP_OTHER_S,
    SETUP_S,
    SLACK,
    START_S,
    STEPS,
    XGB,
)

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
TREE_LIMIT_MIB = 64  # what travels with one command: the working tree and the carried paths


def pack_calls(files: list, staging: Path, limit: int) -> list[dict]:
    """Calls in order, each at most `limit` bytes (a reserve kept for the manifest): the project and the
    engine's wheels first, LightGBM next, then the packed files in parts that fill each call's room."""
    reserve = 64 * 1024
    room = limit - reserve
    order = {"project": 0, BASE: 1, LGB_CUDA: 2, LGB_OPENCL: 3, "sdist": 4, XGB: 5}
    calls: list[dict] = [{"call": 1, "files": [], "bytes": 0}]

    def place(name: str, size: int, sha: str, kind: str, kf):
        if calls[-1]["bytes"] + size > room:
            calls.append({"call": len(calls) + 1, "files": [], "bytes": 0})
        calls[-1]["files"].append({"name": name, "bytes": size, "sha256": sha, "kind": kind, "of": kf.name})
        calls[-1]["bytes"] += size
        return calls[-1]["call"]

    for kf in sorted(files, key=lambda f: (order[f.group], f.packed is not None, f.name)):
        if kf.packed is None:
            if kf.bytes > room:
                raise SystemExit(
                    f"kit: {kf.name} ({kf.bytes / MIB:.1f} MiB) exceeds a call's room and is not "
                    "split: lower --split-over-mib"
                )
            kf.call = place(kf.name, kf.bytes, kf.sha256, "file", kf)
            continue
        packed = kf.parts[0]["path"]
        left = packed.stat().st_size
        pieces = []
        with open(packed, "rb") as f:
            while left > 0:
                free = room - calls[-1]["bytes"]
                if free < MIB:  # less than a MiB left: the next part opens the next call
                    calls.append({"call": len(calls) + 1, "files": [], "bytes": 0})
                    free = room
                chunk = f.read(min(free, left))
                name = f"{packed.name}.part{len(pieces) + 1:02d}"
                (staging / name).write_bytes(chunk)
                call = place(name, len(chunk), hashlib.sha256(chunk).hexdigest(), "part", kf)
                pieces.append(
                    {
                        "name": name,
                        "bytes": len(chunk),
                        "sha256": calls[-1]["files"][-1]["sha256"],
                        "call": call,
                    }
                )
                left -= len(chunk)
        packed.unlink()
        kf.parts = pieces
        kf.call = pieces[-1]["call"]  # complete once its last part has arrived
    return calls


def _ready_by(files: list) -> dict[str, int]:
    """The call after which each group of packages is complete on the box."""
    out: dict[str, int] = {}
    for kf in files:
        out[kf.group] = max(out.get(kf.group, 0), kf.call or 0)
    return out


def make_manifest(out: Path, files, calls, limit, tree_bytes, seconds, about: dict, steps=STEPS) -> dict:
    """The calls with their files, `steps` (default: the plan's), estimates and time limits; `about`: the
    interpreter and platforms resolved for, and what was left out and why (kept in the manifest as they
    are)."""
    ready = _ready_by(files)
    base_ready = max(ready.get(BASE, 1), ready.get("project", 1))
    schedule: dict[int, list[str]] = {c["call"]: [] for c in calls}
    for step in steps:
        needs = [base_ready] + [ready.get(g, 10**6) for g in step.needs if g != BASE]
        when = max(needs)
        if when > len(calls):  # a package the kit does not carry: measured as not measured, in the last call
            when = len(calls)
        schedule[when].append(step.name)
    # keep each call under its time limit: steps past it move to the next call (a new, empty one if needed)
    estimate = {s.name: s.seconds for s in steps}
    n = 1
    while n <= len(schedule):
        budget, kept, moved = CALL_LIMIT_S - SETUP_S.get(n, SETUP_OTHER_S), [], []
        for name in schedule[n]:
            if budget - estimate[name] >= 0 or not kept:
                kept.append(name)
                budget -= estimate[name]
            else:
                moved.append(name)
        schedule[n] = kept
        if moved:
            schedule.setdefault(n + 1, [])
            schedule[n + 1] = moved + schedule[n + 1]
        n += 1
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout
    by_call = {c["call"]: c for c in calls}
    call_list = []
    for n in sorted(schedule):
        c = by_call.get(n, {"call": n, "files": [], "bytes": 0})
        steps_s = sum(estimate[s] for s in schedule[n]) + SETUP_S.get(n, SETUP_OTHER_S)
        last = n == max(schedule)
        limit_s = CALL_LIMIT_S if last else min(CALL_LIMIT_S, int(steps_s * SLACK))
        carry = [os.path.relpath(out / f"c{n}", ROOT)]
        call_list.append(
            {
                "call": n,
                "carry": carry,
                "payload_bytes": c["bytes"],
                "payload_mib": round(c["bytes"] / MIB, 2),
                "with_working_tree_mib": round((c["bytes"] + tree_bytes) / MIB, 2),
                "files": c["files"],
                "steps": schedule[n],
                "estimated_s": steps_s,
                "limit_s": limit_s,  # run.sh stops starting steps and ends the running one by then
                "timeout_s": min(600, limit_s + 30),
                "command": f"bash bench/device/run.sh {n}",
            }
        )
    gaps_s = GAP_S * (len(call_list) - 1)
    total_s = START_S + sum(c["estimated_s"] for c in call_list) + gaps_s
    # run.sh ends the plan by then, counted on the box from call 1's start: the gaps pass on that clock too
    plan_command_s = PLAN_LIMIT_S - START_S
    worst_s = START_S + min(sum(c["limit_s"] for c in call_list) + gaps_s, plan_command_s)
    problems = [
        f"call {c['call']}: {c['payload_mib']} MiB > {limit / MIB:g} MiB"
        for c in call_list
        if c["payload_bytes"] > limit
    ]
    problems += [
        f"call {c['call']}: {c['with_working_tree_mib']} MiB with the working tree > {TREE_LIMIT_MIB} MiB"
        for c in call_list
        if c["payload_bytes"] + tree_bytes > TREE_LIMIT_MIB * MIB
    ]
    notes = []
    if total_s > PLAN_LIMIT_S:
        last = ", ".join(call_list[-1]["steps"][-2:])
        notes.append(f"the estimate, {total_s / 60:.1f} min, exceeds {PLAN_LIMIT_S / 60:g} min: run.sh ends "
                     f"the plan at {worst_s / 60:.1f} min, and the last steps ({last}) may then be "
                     "written as not measured")
    if worst_s > BUDGET_S:
        problems.append(
            f"every call at its time limit takes {worst_s / 60:.1f} min > the {BUDGET_S / 60:g} min budget"
        )
    return {
        "schema": 1,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit.strip(),
        "python": about["python"],
        "platforms": about["platforms"],
        "limit_mib": round(limit / MIB, 2),  # a call's room: 60 MiB at most, less the working tree's share
        "working_tree_mib": round(tree_bytes / MIB, 2),
        "build_seconds": round(seconds, 1),
        "calls": call_list,
        "files": [{k: v for k, v in vars(f).items() if k != "path"} for f in files],
        "ready_after_call": ready,
        "left_out": about["left_out"],
        "image_has": about["image_has"],
        "estimated_device_s": total_s,
        "plan_command_s": plan_command_s,
        "worst_case_device_s": worst_s,
        "problems": problems,
        "notes": notes,
    }


def render(m: dict) -> str:
    lines = [
        f"GPU proof kit of {m['commit'][:12]} ({m['created']}), CPython {m['python']} manylinux x86_64",
        f"{len(m['calls'])} calls, each at most {m['limit_mib']:g} MiB carried (working tree "
        f"{m['working_tree_mib']} MiB beside it); "
        f"estimated device time {m['estimated_device_s'] / 60:.1f} min "
        f"with one machine start; run.sh ends the plan by {m['worst_case_device_s'] / 60:.1f} min "
        "(a step that would start later is written as not measured)",
        "",
    ]
    for c in m["calls"]:
        lines.append(
            f"call {c['call']}: run(command={c['command']!r}, carry={c['carry']}, timeout_s={c['timeout_s']})"
        )
        lines.append(
            f"  carries {c['payload_mib']} MiB ({c['with_working_tree_mib']} MiB with the working tree); "
            f"steps {', '.join(c['steps']) or '-'} (~{c['estimated_s']} s)"
        )
        for f in c["files"]:
            lines.append(f"    {f['bytes'] / MIB:8.2f} MiB  {f['name']}")
    lines += ["", "files in parts (split: the bytes as they are; xz: a stored zip in xz):"]
    for f in m["files"]:
        if f.get("packed"):
            lines.append(
                f"  {f['name']} ({f['packed']}): {f['bytes'] / MIB:.1f} MiB -> "
                f"{f['packed_bytes'] / MIB:.1f} MiB in "
                f"{len(f['parts'])} parts (calls {', '.join(str(p['call']) for p in f['parts'])})"
            )
    lines += ["", "left out on purpose:"] + [f"  {k}: {v}" for k, v in m["left_out"].items()]
    if m.get("notes"):
        lines += ["", "notes:"] + [f"  {n}" for n in m["notes"]]
    if m["problems"]:
        lines += ["", "PROBLEMS:"] + [f"  {p}" for p in m["problems"]]
    return "\n".join(lines) + "\n"
