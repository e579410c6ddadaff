"""`python -m bench.device.kit` (`make device-kit`): fill .device/ with what a GPU box lacks, in calls.

The box has no network and takes at most 64 MiB of files with each command (the working tree included),
so the kit holds: the project at HEAD (`git archive`), every wheel the box's image lacks for CPython 3.12
on manylinux x86_64 (the dependency closure resolved by pip for that interpreter, less the packages the
image already has: box_packages.txt), LightGBM built with its CUDA learner (`--lightgbm-cuda`) beside the
PyPI build (its OpenCL learner), and any file above a call's room stored uncompressed inside xz and split
into parts. A file that pip cannot find as a wheel but is pure Python (antlr4, hydra's parser runtime) is
built into one here. The manifest (.device/manifest.json and MANIFEST.txt) names, per call, the folder to
carry, its files and bytes, the command to run and the steps it measures; each call's folder holds a copy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Optional

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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MIB = 1 << 20
TREE_LIMIT_MIB = 64  # what travels with one command: the working tree and the carried paths
TREE_MARGIN = 1 * MIB  # the working tree may grow by this between building the kit and running it
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
PYTHON_VERSION = "3.12"
# What the runs need beyond the image, as distributions of the versions installed here. MLflow's client,
# its SQLite store (SQLAlchemy, Alembic) and pyfunc models are all in mlflow-skinny: the full `mlflow`
# adds its server and UI (Flask, gunicorn, graphene, ...), which no run on the box starts.
NEEDS = {
    BASE: (
        "hydra-core",
        "omegaconf",
        "mlflow-skinny",
        "sqlalchemy",
        "alembic",
        "optuna",
        "submitit",
        "hydra-submitit-launcher",
    ),
    # XGBoost's CUDA 13 build, for the box's driver (580, CUDA 13.0): 59 MiB against 126 MiB of the `xgboost`
    # wheel (CUDA 12, older architectures too); its nvidia-nccl-cu13 is in the image
    XGB: ("xgboost-cu13",),
    LGB_OPENCL: ("lightgbm",),
}
VERSION_OF = {
    "mlflow-skinny": "mlflow",
    "xgboost-cu13": "xgboost",
}  # pin to the version of this distribution when the first is absent
# Left out of the closure on purpose, with the reason (kept in the manifest).
LEFT_OUT = {
    "mlflow": "mlflow-skinny holds the client, the SQLite store and pyfunc models; the full package adds the "
    "server and UI (Flask, gunicorn, graphene), which no run on the box starts",
    "xgboost": "xgboost-cu13 (the same version, built for CUDA 13) installs the same import package",
}
PURE_SDISTS = {"antlr4-python3-runtime"}  # published as an sdist only; pure Python, built into a wheel here


@dataclass
class KitFile:
    name: str
    bytes: int
    sha256: str
    role: str  # project | wheel
    group: str  # BASE, XGB, LGB_CUDA, LGB_OPENCL or "project"
    packed: Optional[str] = None  # "split": in parts; "xz": an uncompressed copy inside xz, in parts
    parts: list = field(default_factory=list)  # [{name, bytes, sha256, call}]
    call: Optional[int] = None


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def box_packages() -> set[str]:
    lines = (HERE / "box_packages.txt").read_text().splitlines()
    return {normalize(x.split("#")[0].strip()) for x in lines if x.split("#")[0].strip()}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(4 * MIB), b""):
            h.update(chunk)
    return h.hexdigest()


def log(message: str) -> None:
    print(f"[kit {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _pip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"kit: {' '.join(cmd[3:])} failed:\n{proc.stderr[-3000:]}")
    return proc


def _target_args() -> list[str]:
    out = ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp"]
    for p in PLATFORMS:
        out += ["--platform", p]
    return out


def pinned(names) -> list[str]:
    """name==version of each name as installed here (the versions the project is tested with)."""
    out = []
    for name in names:
        for dist in (name, VERSION_OF.get(name)):
            if dist is None:
                continue
            try:
                out.append(f"{name}=={metadata.version(dist)}")
                break
            except metadata.PackageNotFoundError:
                continue
        else:
            out.append(name)
    return out


def resolve(requirements: list[str], local: Path) -> list[tuple[str, str]]:
    """(name, version) of the whole dependency closure for CPython 3.12 on manylinux x86_64."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _pip(
            "install",
            "--dry-run",
            "--quiet",
            "--ignore-installed",
            "--report",
            str(report),
            "--target",
            str(Path(tmp) / "t"),
            "--find-links",
            str(local),
            *_target_args(),
            *requirements,
        )
        data = json.loads(report.read_text())
    return [(i["metadata"]["name"], i["metadata"]["version"]) for i in data["install"]]


def build_pure_sdists(requirements: list[str], local: Path) -> None:
    """Wheels of the closure's sdist-only pure-Python packages, so the binary-only resolution finds them."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _pip("install", "--dry-run", "--quiet", "--ignore-installed", "--report", str(report), *requirements)
        found = json.loads(report.read_text())["install"]
    for item in found:
        name = normalize(item["metadata"]["name"])
        if name in PURE_SDISTS and not list(local.glob(f"{name.replace('-', '_')}-*.whl")):
            _pip("wheel", "--quiet", "--no-deps", "-w", str(local), f"{name}=={item['metadata']['version']}")


def download(pins: list[str], dest: Path) -> None:
    if pins:
        _pip("download", "--quiet", "--no-deps", *_target_args(), "-d", str(dest), *pins)


def project_archive(dest: Path) -> Path:
    path = dest / "project.tar.gz"
    subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar.gz", "-o", str(path), "HEAD"], check=True
    )
    return path


def stored_xz(src: Path, dest: Path) -> Path:
    """The wheel rewritten without zip compression, then xz: a wheel's deflate hides the repetition in its
    shared library from xz; the box gets the same files back (pip installs the stored zip)."""
    stored = dest / (src.name + ".stored")
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            info.compress_type = zipfile.ZIP_STORED
            zout.writestr(info, data)
    out = dest / (src.name + ".xz")
    with open(stored, "rb") as fin, lzma.open(out, "wb", preset=6) as fout:
        shutil.copyfileobj(fin, fout, 16 * MIB)
    stored_sha = sha256(stored)
    stored.unlink()
    return out, stored_sha


def split(path: Path, part_bytes: int) -> list[Path]:
    parts = []
    with open(path, "rb") as f:
        index = 0
        while True:
            chunk = f.read(part_bytes)
            if not chunk:
                break
            index += 1
            part = path.with_name(f"{path.name}.part{index:02d}")
            part.write_bytes(chunk)
            parts.append(part)
    path.unlink()
    return parts


def group_of(name: str) -> str:
    return XGB if normalize(name).startswith("xgboost") else BASE


def working_tree_bytes() -> int:
    """What travels with every command besides the carried folder: tracked and untracked-not-ignored files."""
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    total = 0
    for rel in out.decode().split("\0"):
        p = ROOT / rel
        if rel and p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


def build(
    out: Path,
    *,
    limit_mib: float,
    wheel_dir: Optional[Path],
    lightgbm_cuda: Optional[Path],
    split_over_mib: float,
    xz: bool = False,
    tree_bytes: Optional[int] = None,
) -> dict:
    t0 = time.perf_counter()
    if out.exists():
        shutil.rmtree(out)
    staging = out / "staging"
    staging.mkdir(parents=True)
    limit = int(limit_mib * MIB)
    files: list[KitFile] = []

    def add(path: Path, role: str, group: str) -> KitFile:
        kf = KitFile(path.name, path.stat().st_size, sha256(path), role, group)
        files.append(kf)
        return kf

    add(project_archive(staging), "project", "project")
    left_out = dict(LEFT_OUT)
    skipped_box = []
    if wheel_dir is not None:  # wheels given (tests; an offline rebuild): taken as they are
        wheels = sorted(wheel_dir.glob("*.whl"))
        for w in wheels:
            shutil.copy2(w, staging / w.name)
        groups = {w.name: group_of(w.name.split("-")[0]) for w in wheels}
        if any(normalize(w.name.split("-")[0]) == "lightgbm" for w in wheels):
            groups.update(
                {w.name: LGB_OPENCL for w in wheels if normalize(w.name.split("-")[0]) == "lightgbm"}
            )
    else:
        local = out / "local-wheels"
        local.mkdir()
        requirements = pinned(sum(NEEDS.values(), ()))
        log(
            f"resolving the closure of {' '.join(requirements)} for CPython {PYTHON_VERSION} manylinux x86_64"
        )
        build_pure_sdists(requirements, local)
        closure = resolve(requirements, local)
        box = box_packages()
        take = []
        for name, version in closure:
            n = normalize(name)
            if n in box:
                skipped_box.append(f"{name}=={version}")
            elif n in left_out:
                continue
            else:
                take.append((name, version))
        log(
            f"closure: {len(closure)} distributions; the image has {len(skipped_box)}; "
            f"the kit carries {len(take)}"
        )
        locals_ = {normalize(w.name.split("-")[0]): w for w in local.glob("*.whl")}
        download([f"{n}=={v}" for n, v in take if normalize(n) not in locals_], staging)
        for n, _ in take:
            if normalize(n) in locals_:
                shutil.copy2(locals_[normalize(n)], staging / locals_[normalize(n)].name)
        groups = {}
        for w in staging.glob("*.whl"):
            n = normalize(w.name.split("-")[0])
            groups[w.name] = LGB_OPENCL if n == "lightgbm" else group_of(n)
        shutil.rmtree(local)
    if wheel_dir is None:
        # LightGBM's sdist (1.7 MiB): where the CUDA build is missing or does not load on the box, run.sh
        # builds it there, in the background of call 1, with the image's nvcc
        from pipeline.models.lightgbm_cuda_wheel import sdist

        add(sdist(metadata.version("lightgbm"), staging), "sdist", "sdist")
    if lightgbm_cuda is not None:
        # the CUDA build travels beside the PyPI build under a build tag, so both names stay valid wheels
        parts = lightgbm_cuda.name[:-4].split("-")
        tagged = staging / "-".join(parts[:2] + ["1cuda"] + parts[-3:]) if len(parts) == 5 else None
        name = tagged.name + ".whl" if tagged else lightgbm_cuda.name
        shutil.copy2(lightgbm_cuda, staging / name)
        groups[name] = LGB_CUDA
    for name in sorted(groups):
        add(staging / name, "wheel", groups[name])

    # wheels above the threshold travel in parts that fill each call's room; with --xz, as a stored zip in
    # xz first (xgboost-cu13 3.2.0: 59.0 -> 55.3 MiB, 3 min here: its CUDA code is compressed already)
    for kf in [f for f in files if f.role == "wheel" and f.bytes > split_over_mib * MIB]:
        if xz:
            log(f"xz {kf.name} ({kf.bytes / MIB:.1f} MiB)")
            t = time.perf_counter()
            packed, kf.unpacked_sha256 = stored_xz(staging / kf.name, staging)
            (staging / kf.name).unlink()
            log(f"  -> {packed.stat().st_size / MIB:.1f} MiB in {time.perf_counter() - t:.0f} s")
        else:
            packed = staging / kf.name
            kf.unpacked_sha256 = kf.sha256
        kf.packed = "xz" if xz else "split"
        kf.packed_bytes = packed.stat().st_size
        kf.packed_sha256 = sha256(packed)
        kf.parts = [{"name": packed.name, "path": packed}]

    if tree_bytes is None:
        tree_bytes = working_tree_bytes()
    room = min(limit, TREE_LIMIT_MIB * MIB - tree_bytes - TREE_MARGIN)  # the working tree travels beside it
    calls = _pack(files, staging, room)
    for c in calls:
        folder = out / f"c{c['call']}"
        folder.mkdir()
        for item in c["files"]:
            shutil.move(str(staging / item["name"]), folder / item["name"])
    shutil.rmtree(staging)
    manifest = _manifest(out, files, calls, room, tree_bytes, left_out, skipped_box, time.perf_counter() - t0)
    for c in manifest["calls"]:  # a call that only measures carries its folder too: the manifest
        (out / f"c{c['call']}").mkdir(exist_ok=True)
        (out / f"c{c['call']}" / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (out / "MANIFEST.txt").write_text(render(manifest))
    return manifest


def _pack(files: list[KitFile], staging: Path, limit: int) -> list[dict]:
    """Calls in order, each at most `limit` bytes (a reserve kept for the manifest): the project and the
    engine's wheels first, LightGBM next, then the packed files in parts that fill each call's room."""
    reserve = 64 * 1024
    room = limit - reserve
    order = {"project": 0, BASE: 1, LGB_CUDA: 2, LGB_OPENCL: 3, "sdist": 4, XGB: 5}
    calls: list[dict] = [{"call": 1, "files": [], "bytes": 0}]

    def place(name: str, size: int, sha: str, kind: str, kf: KitFile):
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


def _ready_by(files: list[KitFile]) -> dict[str, int]:
    """The call after which each group of packages is complete on the box."""
    out: dict[str, int] = {}
    for kf in files:
        out[kf.group] = max(out.get(kf.group, 0), kf.call or 0)
    return out


def _manifest(out: Path, files, calls, limit, tree_bytes, left_out, skipped_box, seconds) -> dict:
    ready = _ready_by(files)
    base_ready = max(ready.get(BASE, 1), ready.get("project", 1))
    schedule: dict[int, list[str]] = {c["call"]: [] for c in calls}
    for step in STEPS:
        needs = [base_ready] + [ready.get(g, 10**6) for g in step.needs if g != BASE]
        when = max(needs)
        if when > len(calls):  # a package the kit does not carry: measured as not measured, in the last call
            when = len(calls)
        schedule[when].append(step.name)
    # keep each call under its time limit: steps past it move to the next call (a new, empty one if needed)
    estimate = {s.name: s.seconds for s in STEPS}
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
    total_s = START_S + sum(c["estimated_s"] for c in call_list) + GAP_S * (len(call_list) - 1)
    plan_command_s = PLAN_LIMIT_S - START_S - GAP_S * (len(call_list) - 1)  # run.sh ends the plan by then
    worst_s = (
        START_S + min(sum(c["limit_s"] for c in call_list), plan_command_s) + GAP_S * (len(call_list) - 1)
    )
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
        "python": PYTHON_VERSION,
        "platforms": list(PLATFORMS),
        "limit_mib": round(limit / MIB, 2),  # a call's room: 60 MiB at most, less the working tree's share
        "working_tree_mib": round(tree_bytes / MIB, 2),
        "build_seconds": round(seconds, 1),
        "calls": call_list,
        "files": [{k: v for k, v in vars(f).items() if k != "path"} for f in files],
        "ready_after_call": ready,
        "left_out": left_out,
        "image_has": skipped_box,
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.device.kit", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / ".device")
    p.add_argument(
        "--limit-mib", type=float, default=60.0, help="most bytes one call carries (default 60 MiB)"
    )
    p.add_argument(
        "--split-over-mib",
        type=float,
        default=16.0,
        help="wheels above this size travel in parts that fill each call (default 16)",
    )
    p.add_argument("--xz", action="store_true", help="store those wheels' zip uncompressed inside xz first")
    p.add_argument(
        "--wheels",
        type=Path,
        default=None,
        help="take the wheels of this folder instead of resolving and downloading them",
    )
    p.add_argument(
        "--lightgbm-cuda",
        type=Path,
        default=None,
        help="LightGBM's CUDA build (a wheel; `make lightgbm-cuda-wheel` makes one)",
    )
    args = p.parse_args(argv)
    manifest = build(
        args.out,
        limit_mib=args.limit_mib,
        wheel_dir=args.wheels,
        lightgbm_cuda=args.lightgbm_cuda,
        split_over_mib=args.split_over_mib,
        xz=args.xz,
    )
    print(render(manifest), end="")
    return 1 if manifest["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
