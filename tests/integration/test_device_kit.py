"""The GPU proof kit end to end on a machine without CUDA: `python -m bench.device.kit` packs the project
and wheels into calls under a size limit (a wheel above the threshold as xz in parts across calls), and
`bench/device/run.sh N` for each call reassembles, checks, installs and runs its steps, every GPU figure
written as not measured with the reason. Small wheels made here stand in for the downloads (no network,
no LightGBM compile); the scripts, the splitting and the limits are the real ones."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bench.device.plan import STEPS

ROOT = Path(__file__).resolve().parents[2]
LIMIT_MIB = 4.0
MIB = 1 << 20


def _wheel(folder: Path, name: str, payload: bytes) -> Path:
    version = "0.1"
    files = {
        f"{name}/__init__.py": b"",
        f"{name}/blob.bin": payload,
        f"{name}-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
        ),
        f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = [
        f"{k},sha256={base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b'=').decode()},{len(v)}"
        for k, v in files.items()
    ]
    files[f"{name}-{version}.dist-info/RECORD"] = (
        "\n".join(record + [f"{name}-{version}.dist-info/RECORD,,"]) + "\n"
    ).encode()
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for k, v in files.items():
            z.writestr(k, v)
    return path


def _build(tmp: Path, payload: bytes, *extra: str) -> dict:
    wheels = tmp / "wheels"
    wheels.mkdir()
    _wheel(wheels, "kitprobe_big", payload)
    _wheel(wheels, "kitprobe_small", b"small")
    _wheel(wheels, "lightgbm", b"the PyPI build")  # installed apart, in site-opencl
    out = tmp / "kit"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.device.kit",
            "--out",
            str(out),
            "--wheels",
            str(wheels),
            "--limit-mib",
            str(LIMIT_MIB),
            "--split-over-mib",
            "1",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {
        "tmp": tmp,
        "out": out,
        "big": payload,
        "stdout": proc.stdout,
        "manifest": json.loads((out / "manifest.json").read_text()),
    }


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("kit"), os.urandom(5 * MIB))  # 5 MiB of parts at 4 MiB a call


def _run_call(kit, call: int, state: Path, out: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "KIT_DIR": str(kit["out"]),
        "KIT_STATE": str(state),
        "OUT": str(out),
        "PYTHON": sys.executable,
        "KIT_CALL_LIMIT_S": "300",
    }
    return subprocess.run(
        ["bash", str(ROOT / "bench/device/run.sh"), str(call)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_manifest_keeps_every_call_under_the_limit_and_splits_the_large_wheel(kit):
    m = kit["manifest"]
    assert m["problems"] == []
    assert len(m["calls"]) >= 3  # the project and 5 MiB of parts at 4 MiB a call
    for c in m["calls"]:
        folder = kit["out"] / f"c{c['call']}"
        sizes = sum(f.stat().st_size for f in folder.iterdir() if f.name != "manifest.json")
        assert sizes == c["payload_bytes"] <= LIMIT_MIB * MIB
        assert sorted(f["name"] for f in c["files"]) == sorted(
            p.name for p in folder.iterdir() if p.name != "manifest.json"
        )
        assert c["command"] == f"bash bench/device/run.sh {c['call']}" and len(c["command"]) <= 2000
        assert f"call {c['call']}: run(command='{c['command']}'" in kit["stdout"]
    big = next(f for f in m["files"] if f["name"].startswith("kitprobe_big"))
    assert big["packed"] == "split" and len(big["parts"]) >= 2
    assert len({p["call"] for p in big["parts"]}) >= 2
    assert sum(p["bytes"] for p in big["parts"]) == big["packed_bytes"]
    scheduled = [s for c in m["calls"] for s in c["steps"]]
    assert sorted(scheduled) == sorted(s.name for s in STEPS)


def test_the_project_archive_carries_the_code_and_tests_and_leaves_out_what_the_box_never_reads(kit):
    """Past results grow with every bench pass: shipped, they would one day push the project past a call's
    room. The archive holds the commit's code and tests and none of bench/device/kit.py's NOT_SHIPPED."""
    import tarfile

    from bench.device.kit import NOT_SHIPPED

    archive = next(kit["out"].glob("c*/project.tar.gz"))
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert {"pipeline/__init__.py", "bench/device/run.sh", "tests/conftest.py"} <= names
    shipped_elsewhere = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--", *NOT_SHIPPED], capture_output=True, text=True, check=True
    ).stdout.split()
    assert any(n.startswith("bench/results/") for n in shipped_elsewhere)  # the repository has them
    assert not [n for n in names if n.startswith(NOT_SHIPPED)]


def test_the_calls_reassemble_install_and_record_every_gpu_figure_as_not_measured(kit, tmp_path):
    state, out = tmp_path / "state", tmp_path / "out"
    for c in kit["manifest"]["calls"]:
        proc = _run_call(kit, c["call"], state, out)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    installed = state / "site" / "kitprobe_big" / "blob.bin"
    assert installed.read_bytes() == kit["big"]  # the parts of three calls, joined, unpacked and installed
    assert (state / "site-opencl" / "lightgbm" / "blob.bin").read_bytes() == b"the PyPI build"
    assert not (state / "site" / "lightgbm").exists()
    assert (state / "project" / "pipeline" / "__init__.py").exists()
    results = sorted(out.glob("*-gpu-no-cuda-c*.json"))
    assert len(results) == len(kit["manifest"]["calls"])
    assert len(list(out.iterdir())) <= 8  # what comes back from the box: at most 8 files
    steps, figures = {}, []
    for path in results:
        data = json.loads(path.read_text())
        assert {"opencl_platforms", "opencl_icd_files", "nvidia_smi"} <= set(data["device"])
        for suite in data["suites"].values():
            steps.update(suite["settings"]["steps"])
            figures += suite["figures"]
    assert set(steps) == {s.name for s in STEPS}
    assert figures and all(f["status"] == "not measured" and "no CUDA device" in f["reason"] for f in figures)
    names = {(f["group"], f["name"]) for f in figures}
    assert ("gbm_gpu vs CPU · Adult", "speed-up whole process") in names
    assert ("network on CUDA · fp32", "engine loop rows/s") in names
    assert ("two 0.5-GPU network fits", "speed-up (wall)") in names
    assert ("LightGBM CUDA build · synthetic 1M", "CUDA seconds") in names

    collected = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.device.collect", str(out), "--results", str(collected)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    merged = list(collected.glob("*-full-gpu-no-cuda.json"))
    assert len(merged) == 1
    run = json.loads(merged[0].read_text())
    assert len(run["calls"]) == len(results)
    assert sum(len(s["figures"]) for s in run["suites"].values()) == len(figures)


def test_a_call_on_a_machine_that_lost_the_earlier_calls_says_so(kit, tmp_path):
    last = kit["manifest"]["calls"][-1]["call"]
    proc = _run_call(kit, last, tmp_path / "state", tmp_path / "out")
    assert proc.returncode == 3
    assert "run the calls again from call 1" in proc.stdout


def test_a_damaged_part_is_refused(kit, tmp_path):
    damaged = tmp_path / "kit"
    import shutil

    shutil.copytree(kit["out"], damaged)
    call = next(c["call"] for c in kit["manifest"]["calls"] if any(f["kind"] == "part" for f in c["files"]))
    part = next(p for p in (damaged / f"c{call}").iterdir() if ".part" in p.name)
    data = bytearray(part.read_bytes())
    data[0] ^= 0xFF
    part.write_bytes(bytes(data))
    for earlier in range(1, call):
        assert (
            _run_call({**kit, "out": damaged}, earlier, tmp_path / "state", tmp_path / "out").returncode == 0
        )
    proc = _run_call({**kit, "out": damaged}, call, tmp_path / "state", tmp_path / "out")
    assert proc.returncode == 2
    assert "does not match the manifest" in proc.stdout


def test_an_xz_packed_wheel_is_unpacked_to_the_same_bytes(tmp_path):
    from bench.device import onbox

    text = b"".join(b"%d,%x;" % (i, i * 7919 % 65521) for i in range(150_000))  # 1.6 MiB that xz shrinks
    kit = _build(tmp_path, text, "--xz", "--split-over-mib", "0.1")
    big = next(f for f in kit["manifest"]["files"] if f["name"].startswith("kitprobe_big"))
    assert big["packed"] == "xz" and big["packed_bytes"] < big["bytes"]
    state = tmp_path / "state"
    for c in kit["manifest"]["calls"]:
        assert onbox.main([str(kit["out"] / f"c{c['call']}"), str(state), sys.executable]) == 0
    assert (state / "site" / "kitprobe_big" / "blob.bin").read_bytes() == text


def test_collect_turns_measured_figures_into_fit_cost_points(tmp_path):
    from bench.device.collect import calibration, call_files, merge

    def fig(group, name, median):
        return {"group": group, "name": name, "unit": "s", "median": median, "min": median, "max": median,
                "n": 1}

    calls = [
        {"kit": {"commit": "abc"}, "machine": {"cpu_cores": 16},
         "suites": {"gpu": {"figures": [fig("network on CUDA · fp32", "engine loop rows/s", 12_800_000),
                                        fig("LightGBM CUDA build · synthetic 1M", "CUDA seconds", 1.2),
                                        fig("LightGBM CUDA build · synthetic 1M", "CPU seconds", 4.8),
                                        fig("two 0.5-GPU network fits", "speed-up (wall)", 1.41)]}}},
        {"kit": {"commit": "abc"}, "machine": {"cpu_cores": 16},
         "suites": {"gpu": {"figures": [fig("XGBoost · synthetic 1M", "CUDA seconds", 1.5),
                                        fig("XGBoost · synthetic 1M", "CPU hist seconds", 4.7)]}}},
    ]
    for n, data in enumerate(calls, 1):
        (tmp_path / f"20261201T000000Z-gpu-nvidia-h100-80gb-hbm3-c{n}.json").write_text(json.dumps(data))
    (run,) = merge(call_files([tmp_path])).values()
    assert run["_name"] == "20261201T000000Z-full-gpu-nvidia-h100-80gb-hbm3.json"
    out = calibration(run)
    assert out["learners"]["lightgbm/cuda"] == {"device": "cuda", "points": [[2.56, 1.2]], "start_s": 0.5}
    assert out["learners"]["lightgbm/cpu"] == {"device": "cpu", "points": [[2.56, 4.8]], "threads": 16}
    assert out["learners"]["xgboost/hist"]["points"] == [[2.56, 4.7]]
    assert out["learners"]["network/cuda"]["points"] == [[6.4, 0.5]]  # 6.4M row-epochs at 12.8M rows/s
    assert out["packing"]["network"]["speed_up"] == 1.41
    assert "lightgbm/opencl" not in out["learners"]  # not measured: no point


def test_collect_takes_a_step_run_again_in_a_later_call_in_place_of_its_unmeasured_figures(tmp_path):
    from bench.device.collect import call_files, merge

    cut = {"group": "XGBoost · synthetic 1M", "name": "CUDA seconds", "status": "not measured", "reason": "cut"}
    measured = {"group": "XGBoost · synthetic 1M", "name": "CUDA seconds", "median": 1.5, "values": [1.5]}
    again = dict(measured, median=9.9)
    for n, figure in enumerate((cut, measured, again), 1):
        data = {"kit": {"commit": "abc"}, "suites": {"gpu": {"figures": [figure]}}}
        (tmp_path / f"20261201T00000{n}Z-gpu-nvidia-h200-c{n}.json").write_text(json.dumps(data))
    (run,) = merge(call_files([tmp_path])).values()
    assert run["suites"]["gpu"]["figures"] == [measured]  # once, measured, its first measure


def test_a_kit_of_chosen_steps_measures_those_and_registers_an_unregistered_nvidia_opencl_driver(tmp_path):
    """`--steps` makes a kit of the steps named (here two measured on demand, not in the default plan); on a
    box whose image has NVIDIA's OpenCL driver but no ICD file naming it (LightGBM's own loader then sees no
    GPU), run.sh registers it for the call: the box record shows the folder and each loader's listing."""
    from bench.device.plan import EXTRA_STEPS

    chosen = [s.name for s in EXTRA_STEPS]
    kit = _build(tmp_path, b"small payload", "--steps", ",".join(chosen))
    assert [s for c in kit["manifest"]["calls"] for s in c["steps"]] == chosen
    shims = tmp_path / "bin"
    shims.mkdir()
    driver = tmp_path / "driver" / "libnvidia-opencl.so.1"
    (shims / "ldconfig").write_text(f"#!/bin/sh\necho '\tlibnvidia-opencl.so.1 (libc6,x86-64) => {driver}'\n")
    (shims / "ldconfig").chmod(0o755)
    icds = tmp_path / "vendors"
    icds.mkdir()
    (icds / "portable.icd").write_text("libportable.so\n")
    state, out = tmp_path / "state", tmp_path / "out"
    env = {**os.environ, "KIT_DIR": str(kit["out"]), "KIT_STATE": str(state), "OUT": str(out),
           "PYTHON": sys.executable, "KIT_CALL_LIMIT_S": "300", "PATH": f"{shims}:{os.environ['PATH']}",
           "OCL_ICD_VENDORS": str(icds)}
    proc = subprocess.run(["bash", str(ROOT / "bench/device/run.sh"), "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "registered for this call" in proc.stdout
    assert (state / "icd" / "nvidia.icd").read_text().strip() == str(driver)
    assert (state / "icd" / "portable.icd").read_text() == "libportable.so\n"
    (result,) = out.glob("*-gpu-no-cuda-c1.json")
    data = json.loads(result.read_text())
    assert data["device"]["opencl_env"]["OCL_ICD_VENDORS"] == str(state / "icd")
    assert {"nvidia.icd", "portable.icd"} == set(data["device"]["opencl_icd_files"])
    assert "opencl_platforms_lightgbm" in data["device"]
    figures = [f for s in data["suites"].values() for f in s["figures"]]
    groups = {f["group"] for f in figures}
    assert groups == {"network on CUDA · fp32 · batch sizes", "LightGBM CUDA build · synthetic 4M"}
    assert all(f["status"] == "not measured" and "no CUDA device" in f["reason"] for f in figures)
