"""The box's half of the kit, standard library only: take one call's carried files, reassemble the files
whose last part has arrived (each part and the result checked against the manifest's SHA-256), install
the wheels that are complete and not yet installed, and unpack the project.

`python3 bench/device/onbox.py CALL_DIR STATE`. STATE (default /tmp/gpukit) outlives a command while the
machine stays warm, so the parts of a file sent over several calls meet there. Prints one JSON line:
what this call added.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

OPENCL = "lightgbm-opencl"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


class KitError(RuntimeError):
    pass


def gather(call_dir: Path, files: Path, manifest: dict, call: int) -> list[str]:
    """Copy this call's files into the state, each checked against the manifest."""
    files.mkdir(parents=True, exist_ok=True)
    listed = next(c for c in manifest["calls"] if c["call"] == call)["files"]
    out = []
    for item in listed:
        src = call_dir / item["name"]
        if not src.is_file():
            raise KitError(f"{src} is missing: carry {call_dir} with this call")
        if src.stat().st_size != item["bytes"] or sha256(src) != item["sha256"]:
            raise KitError(f"{src} does not match the manifest (bytes or SHA-256): rebuild the kit")
        shutil.copyfile(src, files / item["name"])
        out.append(item["name"])
    return out


def assemble(files: Path, manifest: dict) -> list[str]:
    """Join the parts of each file whose parts are all here (unpacking xz), checking parts and result."""
    done = []
    for f in manifest["files"]:
        if not f.get("packed") or (files / f["name"]).exists():
            continue
        parts = [files / p["name"] for p in f["parts"]]
        if not all(p.exists() for p in parts):
            continue
        joined = files / (f["name"] + ".joined")
        with open(joined, "wb") as out:
            for p in parts:
                with open(p, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 24)
        if sha256(joined) != f["packed_sha256"]:
            raise KitError(f"the parts of {f['name']} joined do not match the manifest: a part is damaged")
        target = files / f["name"]
        if f["packed"] == "xz":
            with lzma.open(joined, "rb") as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 24)
        else:
            joined.replace(target)
        if sha256(target) != f["unpacked_sha256"]:
            target.unlink()
            raise KitError(f"{f['name']} unpacked does not match the manifest")
        joined.unlink(missing_ok=True)
        for p in parts:
            p.unlink()
        done.append(f["name"])
    return done


def install(files: Path, state: Path, manifest: dict, python: str) -> dict[str, list[str]]:
    """pip install --no-index --no-deps --target of the complete wheels not installed yet: LightGBM's PyPI
    build (its OpenCL learner) apart in site-opencl, everything else in site."""
    record = state / "installed.json"
    installed = set(json.loads(record.read_text())) if record.exists() else set()
    todo: dict[str, list[str]] = {"site": [], "site-opencl": []}
    for f in manifest["files"]:
        if f["role"] != "wheel" or f["name"] in installed or not (files / f["name"]).exists():
            continue
        todo["site-opencl" if f["group"] == OPENCL else "site"].append(f["name"])
    built = sorted((state / "lightgbm-cuda-built").glob("lightgbm-*.whl"))  # run.sh's fallback build
    if built and built[-1].name not in installed:
        todo["site"].append(str(built[-1]))
    for target, names in todo.items():
        if not names:
            continue
        cmd = [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--upgrade",
            "--disable-pip-version-check",
            "--target",
            str(state / target),
            *[str(files / n) for n in names],
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise KitError(f"pip install into {target} failed: {proc.stderr[-2000:]}")
        installed.update(Path(n).name for n in names)
        for n in names:
            (files / n).unlink(missing_ok=True)  # installed: the disk and the next copy need it no more
    record.write_text(json.dumps(sorted(installed)))
    return todo


def _sdist(files: Path) -> str:
    found = sorted(files.glob("lightgbm-*.tar.gz"))
    return str(found[-1]) if found else ""


def unpack_project(files: Path, state: Path) -> bool:
    archive = files / "project.tar.gz"
    if not archive.exists():
        return False
    project = state / "project"
    if project.exists():
        shutil.rmtree(project)
    project.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(project, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(project)
    archive.unlink()
    return True


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    call_dir = Path(argv[0])
    state = Path(argv[1] if len(argv) > 1 else "/tmp/gpukit")
    python = argv[2] if len(argv) > 2 else sys.executable
    manifest = json.loads((call_dir / "manifest.json").read_text())
    call = int(call_dir.name.lstrip("c"))
    state.mkdir(parents=True, exist_ok=True)
    (state / "manifest.json").write_text(json.dumps(manifest))
    files = state / "files"
    t0 = time.perf_counter()
    result = {"call": call, "gathered": gather(call_dir, files, manifest, call)}
    result["assembled"] = assemble(files, manifest)
    result["installed"] = install(files, state, manifest, python)
    result["project"] = unpack_project(files, state)
    waiting = [
        f["name"]
        for f in manifest["files"]
        if f.get("packed") and any((files / p["name"]).exists() for p in f["parts"])
    ]
    result["waiting_for_parts"] = waiting
    result["lightgbm_sdist"] = _sdist(files)
    result["seconds"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KitError as exc:
        print(f"kit: {exc}", file=sys.stderr)
        sys.exit(2)
