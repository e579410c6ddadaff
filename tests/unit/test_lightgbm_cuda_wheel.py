"""`make lightgbm-cuda-wheel`'s build: the paths CMake gets, whatever folder the build is started from."""

from pathlib import Path

import pipeline.models.lightgbm_cuda_wheel as wheel


def test_relative_folders_reach_cmake_as_absolute_paths(tmp_path, monkeypatch):
    """The Makefile passes `--out build/lightgbm-cuda`; CMake resolves a relative CMAKE_CUDA_COMPILER from its own
    build folder, where no nvcc is, and the configure step failed."""
    monkeypatch.chdir(tmp_path)
    seen = {}

    def toolkit(folder, cuda):
        root, nccl = folder / "nvidia" / "cu13", folder / "nvidia" / "nccl"
        (root / "bin").mkdir(parents=True)
        return root, nccl

    def pip(*args, env=None):
        seen["args"] = args
        out = Path(args[args.index("-w") + 1])
        (out / "lightgbm-4.7.0-1cuda-py3-none-linux_x86_64.whl").write_bytes(b"")

    monkeypatch.setattr(wheel, "toolkit", toolkit)
    monkeypatch.setattr(wheel, "_pip", pip)
    monkeypatch.setattr(wheel, "_unpacked", lambda archive, folder: folder)
    made = wheel.build(Path("build/lightgbm-cuda"), work=Path("build/work"), version="4.7.0",
                       source=Path("lightgbm-4.7.0.tar.gz"))
    assert made.is_absolute() and made.exists()
    paths = [a.split("=", 2)[-1] for a in seen["args"] if a.startswith("--config-settings=")
             and ("COMPILER" in a or "ROOT" in a or "build-dir" in a)]
    assert len(paths) == 4 and all(Path(p).is_absolute() for p in paths), paths
    assert Path(seen["args"][seen["args"].index("-w") + 1]).is_absolute()
