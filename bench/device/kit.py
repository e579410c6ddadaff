"""`python -m bench.device.kit` (`make device-kit`): fill .device/ with what a GPU box lacks, in calls.

The box has no network and takes at most 64 MiB of files with each command (the working tree included),
so the kit holds: the project at HEAD (`git archive`), every wheel the box's image lacks for CPython 3.12
on manylinux x86_64 (the dependency closure resolved by pip for that interpreter, less the packages the
image already has: box_packages.txt), LightGBM built with its CUDA learner (`--lightgbm-cuda`) beside the
PyPI build (its OpenCL learner), and any file above a call's room stored uncompressed inside xz and split
into parts. A file that pip cannot find as a wheel but is pure Python (antlr4, hydra's parser runtime) is
built into one here. The manifest (.device/manifest.json and MANIFEST.txt, laid out by layout.py) names,
per call, the folder to carry, its files and bytes, the command to run and the steps it measures; each
call's folder holds a copy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Optional, Sequence

from bench.device.layout import MIB, TREE_LIMIT_MIB, make_manifest, pack_calls, render
from bench.device.plan import BASE, BY_NAME, EXTRA_STEPS, LGB_CUDA, LGB_OPENCL, STEPS, XGB, Step

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
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


# what the box never reads: past results (they grow with every bench pass), screenshots, the rendered report
NOT_SHIPPED = ("bench/results", "docs/img", "docs/benchmarks.md")


def project_archive(dest: Path) -> Path:
    """`git archive` of HEAD without NOT_SHIPPED: the box measures exactly this commit's code and tests."""
    path = dest / "project.tar.gz"
    excluded = [f":(exclude){p}" for p in NOT_SHIPPED]
    subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar.gz", "-o", str(path), "HEAD", "--", ".", *excluded],
        check=True,
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
    steps: Sequence[Step] = STEPS,
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
    calls = pack_calls(files, staging, room)
    for c in calls:
        folder = out / f"c{c['call']}"
        folder.mkdir()
        for item in c["files"]:
            shutil.move(str(staging / item["name"]), folder / item["name"])
    shutil.rmtree(staging)
    about = {"python": PYTHON_VERSION, "platforms": list(PLATFORMS), "left_out": left_out,
             "image_has": skipped_box}
    manifest = make_manifest(out, files, calls, room, tree_bytes, time.perf_counter() - t0, about, steps)
    for c in manifest["calls"]:  # a call that only measures carries its folder too: the manifest
        (out / f"c{c['call']}").mkdir(exist_ok=True)
        (out / f"c{c['call']}" / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (out / "MANIFEST.txt").write_text(render(manifest))
    return manifest


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.device.kit", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / ".device")
    p.add_argument("--limit-mib", type=float, default=60.0,
                   help="most bytes one call carries (default 60 MiB)")
    p.add_argument("--split-over-mib", type=float, default=16.0,
                   help="wheels above this size travel in parts that fill each call (default 16)")
    p.add_argument("--xz", action="store_true", help="store those wheels' zip uncompressed inside xz first")
    p.add_argument("--wheels", type=Path, default=None,
                   help="take the wheels of this folder instead of resolving and downloading them")
    p.add_argument("--lightgbm-cuda", type=Path, default=None,
                   help="LightGBM's CUDA build (a wheel; `make lightgbm-cuda-wheel` makes one)")
    p.add_argument("--steps", default=None,
                   help="the steps to measure, in order, comma-separated (default: the plan's: "
                        f"{','.join(s.name for s in STEPS)}; on demand: "
                        f"{','.join(s.name for s in EXTRA_STEPS)})")
    args = p.parse_args(argv)
    steps = STEPS
    if args.steps:
        unknown = [n for n in args.steps.split(",") if n not in BY_NAME]
        if unknown:
            p.error(f"--steps: unknown step(s) {', '.join(unknown)}; valid: {', '.join(BY_NAME)}")
        steps = tuple(BY_NAME[n] for n in args.steps.split(","))
    manifest = build(args.out, limit_mib=args.limit_mib, wheel_dir=args.wheels,
                     lightgbm_cuda=args.lightgbm_cuda, split_over_mib=args.split_over_mib, xz=args.xz,
                     steps=steps)
    print(render(manifest), end="")
    return 1 if manifest["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
