"""Build LightGBM's CUDA learner (`device_type=cuda`) into a wheel with the CUDA compiler from PyPI.

`python -m pipeline.models.lightgbm_cuda_wheel --out DIR` needs a C++ compiler and network access to PyPI,
no system CUDA toolkit and no GPU: it installs `cuda-toolkit[nvcc,cccl,cudart]` (nvcc, its headers, the
static runtime) and `nvidia-nccl-cu13` (LightGBM's CUDA build links NCCL) into a folder of their own,
downloads the sdist of the LightGBM version installed, and builds it with `USE_CUDA=ON` for the given
architectures. The library links the CUDA runtime statically (CMake's default), so it needs only the
driver's libcuda and libnccl.so.2 at run time; its RPATH points at `../../nvidia/nccl/lib`, where
`pip install nvidia-nccl-cu13` puts NCCL in the same site-packages. The driver must support the toolkit's
CUDA version (13.0: driver 580 or newer). `make install-gpu` uses this where no nvcc is on the PATH.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

CUDA = "13.0"
ARCHITECTURES = "90"  # Hopper (H100, H200); CMake's list syntax: "80;90"


def _pip(*args: str, env=None) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)


def toolkit(folder: Path, cuda: str = CUDA) -> tuple[Path, Path]:
    """nvcc's root and NCCL's root, installed from PyPI into `folder` once."""
    root = folder / "nvidia" / f"cu{cuda.split('.')[0]}"
    nccl = folder / "nvidia" / "nccl"
    major = cuda.split(".")[0]
    if not (root / "bin" / "nvcc").exists() or not (nccl / "include" / "nccl.h").exists():
        _pip(
            "install",
            "--quiet",
            "--target",
            str(folder),
            "--upgrade",
            f"cuda-toolkit[nvcc,cccl,cudart]=={cuda}.*",
            f"nvidia-nccl-cu{major}",
        )
    # nvcc.profile looks for lib64/; CMake's find_library wants the unversioned names
    if not (root / "lib64").exists():
        (root / "lib64").symlink_to("lib")
    for lib, soname in (
        (root / "lib" / "libcudart.so", f"libcudart.so.{major}"),
        (nccl / "lib" / "libnccl.so", "libnccl.so.2"),
    ):
        if not lib.exists() and (lib.parent / soname).exists():
            lib.symlink_to(soname)
    return root, nccl


def sdist(version: str, folder: Path) -> Path:
    found = sorted(folder.glob(f"lightgbm-{version}.tar.gz"))
    if not found:
        _pip(
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            "lightgbm",
            "-d",
            str(folder),
            f"lightgbm=={version}",
        )
        found = sorted(folder.glob(f"lightgbm-{version}.tar.gz"))
    return found[0]


def _unpacked(archive: Path, folder: Path) -> Path:
    """The sdist unpacked once into a fixed folder: pip builds a folder in place, so a second build reuses
    the objects of the first (pip would unpack an archive into a new temporary folder each time)."""
    import tarfile

    if archive.is_dir():
        return archive
    name = archive.name.removesuffix(".tar.gz")
    if not (folder / name / "pyproject.toml").exists():
        folder.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(
                folder
            )
    return folder / name


def build(
    out: Path,
    *,
    work: Path,
    version: str,
    architectures: str = ARCHITECTURES,
    cuda: str = CUDA,
    source: Path | None = None,
    jobs: int | None = None,
) -> Path:
    # CMake reads the toolkit's paths from its own build folder: relative ones would point nowhere
    out, work = out.resolve(), work.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    root, nccl = toolkit(work / "toolkit", cuda)
    source = _unpacked(source or sdist(version, work), work / "src")
    env = {
        **os.environ,
        "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs or os.cpu_count() or 2),
        "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    for key in ("CUDA_HOME", "CUDA_PATH", "CUDAToolkit_ROOT"):  # the PyPI toolkit, never a system one
        env.pop(key, None)
    # LightGBM 4.7's c_api.cpp includes nccl.h without the target that carries NCCL's include folder
    env["CPATH"] = os.pathsep.join(x for x in (str(nccl / "include"), os.environ.get("CPATH", "")) if x)
    defines = {
        "USE_CUDA": "ON",
        "CMAKE_CUDA_ARCHITECTURES": architectures,
        "CMAKE_CUDA_COMPILER": str(root / "bin" / "nvcc"),
        "CUDAToolkit_ROOT": str(root),
        "BUILD_WITH_SHARED_NCCL": "ON",
        "NCCL_ROOT": str(nccl),
        "CMAKE_INSTALL_RPATH": "$ORIGIN/../../nvidia/nccl/lib",
    }
    before = set(out.glob("lightgbm-*.whl"))
    t0 = time.perf_counter()
    _pip(
        "wheel",
        "--no-deps",
        "-w",
        str(out),
        *[f"--config-settings=cmake.define.{k}={v}" for k, v in defines.items()],
        f"--config-settings=build-dir={work / 'build'}",
        str(source),
        env=env,
    )
    made = sorted(set(out.glob("lightgbm-*.whl")) - before) or sorted(out.glob(f"lightgbm-{version}-*.whl"))
    print(f"built {made[-1]} in {time.perf_counter() - t0:.0f} s", flush=True)
    return made[-1]


def linkage(library: Path) -> dict:
    """What a built library needs from the system: DT_NEEDED entries, RPATH, the newest GLIBC version."""
    needed = re.findall(
        r"\(NEEDED\)\s+Shared library: \[(.+?)\]",
        subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout,
    )
    rpath = re.findall(
        r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[(.+?)\]",
        subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout,
    )
    symbols = subprocess.run(["objdump", "-T", str(library)], capture_output=True, text=True).stdout
    glibc = sorted(
        set(re.findall(r"GLIBC_([0-9.]+)", symbols)), key=lambda v: tuple(int(x) for x in v.split("."))
    )
    return {
        "needed": needed,
        "rpath": rpath,
        "newest_glibc": glibc[-1] if glibc else None,
        "cudart_dynamic": any("cudart" in n for n in needed),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pipeline.models.lightgbm_cuda_wheel", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--out", type=Path, required=True, help="folder for the wheel")
    p.add_argument(
        "--work", type=Path, default=None, help="toolkit, sdist and build folder (default: OUT/../work)"
    )
    p.add_argument("--version", default=None, help="LightGBM version (default: the one installed)")
    p.add_argument("--sdist", type=Path, default=None, help="build from this sdist instead of downloading it")
    p.add_argument(
        "--architectures", default=ARCHITECTURES, help=f"CMAKE_CUDA_ARCHITECTURES (default {ARCHITECTURES})"
    )
    p.add_argument("--cuda", default=CUDA, help=f"the CUDA toolkit's version from PyPI (default {CUDA})")
    p.add_argument("--jobs", type=int, default=None)
    args = p.parse_args(argv)
    version = args.version or metadata.version("lightgbm")
    wheel = build(
        args.out,
        work=args.work or args.out.parent / "lightgbm-cuda-work",
        version=version,
        architectures=args.architectures,
        cuda=args.cuda,
        source=args.sdist,
        jobs=args.jobs,
    )
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
