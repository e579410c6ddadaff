"""GPU truth: these run only where CUDA is visible (`pytest -m gpu`; conftest skips them elsewhere).

Each asserts on what the library or NVML reports about where the work ran (an XGBoost booster's own
`device`, the device of a network's parameters, the OpenCL vendor LightGBM announced, the devices NVML
saw a fit's process on, the fits' times), never on a string built from the config."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import DataConf
from pipeline.data import load
from pipeline.models import FitContext, LightGBMModel, Placement, TorchMLPModel, XGBoostModel

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def device_count() -> int:
    import torch

    return torch.cuda.device_count()


@pytest.fixture(scope="module")
def adult():
    return load(DataConf(max_rows=20_000), ROOT)


def fit(model, data, gpus=(0,)):
    ctx = FitContext(data.problem_type, data.num_classes, Placement(4, gpu_ids=gpus, local_gpus=gpus), seed=0,
                     eval_metric="roc_auc")
    tr, va = data.train_idx, data.val_idx
    return model.fit(data.X.iloc[tr], data.y[tr], data.X.iloc[va], data.y[va], ctx)


def test_network_bf16_on_the_gpu(adult):
    model = fit(TorchMLPModel({"device": "cuda", "precision": "bf16-mixed", "max_epochs": 5, "batch_size": 2048}, "nn"),
                adult)
    assert max(model.history_["peak_gpu_memory_mb"]) > 0
    assert model.history_["rows_per_second"][-1] > 0
    proba = model.predict_proba(adult.X.iloc[adult.test_idx])
    from pipeline.metrics import METRICS

    assert METRICS["roc_auc"](adult.y[adult.test_idx], proba) > 0.85
    assert next(model._module().parameters()).device.type == "cuda"  # where it predicted: its weights' device


def test_network_training_uses_the_fused_optimizer_on_cuda(adult):
    import torch

    from pipeline.metrics import METRICS
    from pipeline.nn.loop import Arrays, Loop, LoopConfig, NetSpec

    seen = []
    original = torch.optim.AdamW.__init__

    def spy(self, params, **kwargs):
        seen.append(kwargs.get("fused"))
        original(self, params, **kwargs)

    torch.optim.AdamW.__init__ = spy
    try:
        x = torch.randn(4096, 8)
        c = torch.zeros(4096, 0, dtype=torch.long)
        y = (x[:, 0] > 0).long()
        Loop(NetSpec(8, (), 2), LoopConfig(batch_size=512, max_epochs=1, patience=0), "binary", METRICS["accuracy"],
             torch.device("cuda:0")).run(Arrays(x, c, y, x[:512], c[:512], y[:512]))
    finally:
        torch.optim.AdamW.__init__ = original
    assert seen == [True]


def test_out_of_memory_back_off_under_a_tiny_memory_fraction(tmp_path):
    """A wide network and a huge batch under a small per-process memory fraction: the batch halves."""
    code = f"""
import sys, json, torch
sys.path.insert(0, {str(ROOT)!r})
from pipeline.nn.loop import Arrays, Loop, LoopConfig, NetSpec
from pipeline.metrics import METRICS
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(2 * 2**30 / total, 0)   # 2 GiB of this device
n = 200_000
g = torch.Generator().manual_seed(0)
x = torch.randn(n, 64, generator=g); c = torch.zeros(n, 0, dtype=torch.long); y = (x[:, 0] > 0).long()
arrays = Arrays(x, c, y, x[:4096], c[:4096], y[:4096])
spec = NetSpec(64, (), 2, (8192, 8192), 0.0, 4)
result = Loop(spec, LoopConfig(batch_size=131072, max_epochs=1, patience=0), "binary", METRICS["accuracy"],
              torch.device("cuda:0")).run(arrays)
print(json.dumps({{"batch": result.batch_size, "backoffs": result.oom_backoffs}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["backoffs"] >= 1 and out["batch"] < 131072
    assert "halving it to" in proc.stderr


def booster_device(model) -> str:
    return json.loads(model.booster_.save_config())["learner"]["generic_param"]["device"]


def test_xgboost_trains_and_predicts_on_cuda(adult):
    model = fit(XGBoostModel({"device": "cuda", "num_boost_round": 200, "early_stopping_rounds": 20}, "xgboost"), adult)
    assert booster_device(model).startswith("cuda")  # XGBoost's own record: it falls back to the CPU silently
    model.place("cuda:0", 2)
    model.predict_proba(adult.X.iloc[adult.test_idx])
    assert booster_device(model) == "cuda:0"


LIGHTGBM_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from pipeline.config import DataConf
from pipeline.data import load
from pipeline.memory.measure import PeakMemory
from pipeline.models import FitContext, LightGBMModel, Placement
from pathlib import Path
data = load(DataConf(max_rows=20_000), Path({root!r}))
model = LightGBMModel({params!r}, "lightgbm")
ctx = FitContext(data.problem_type, data.num_classes, Placement(2, gpu_ids=(0,), local_gpus=(0,)), seed=0)
tr, va = data.train_idx, data.val_idx
with PeakMemory(gpu=True) as peak:
    model.fit(data.X.iloc[tr], data.y[tr], data.X.iloc[va], data.y[va], ctx)
print(json.dumps({{"peak_gpu": peak.gpu, "nvml_devices": sorted(peak.gpu_devices),
                  "vendor": getattr(model, "device_vendor_", None), "rounds": model.best_iteration_}}))
"""


def lightgbm_fit_in_a_child(params: dict, env=None) -> dict:
    """A LightGBM fit in a fresh process (no CUDA context from other tests), with what NVML saw it use."""
    import os

    code = LIGHTGBM_CHILD.format(root=str(ROOT), params=params)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def skip_without_opencl_learner() -> None:
    """A CUDA build of LightGBM (make install-gpu) has no OpenCL learner: its tests belong to the PyPI build.
    Read from the library file, as planning reads it: a probe fit would train on the platform's first
    device, which may be a CPU listed before the GPU."""
    from pipeline.models.lightgbm_build import MARKERS, _library_file, built_learners

    library = _library_file()
    built = built_learners(library)
    if built is not None and not built["gpu"]:
        pytest.skip(f"this LightGBM has no OpenCL learner ({MARKERS['gpu']}: {library}): "
                    "the PyPI build has one")


def test_lightgbm_opencl_learner_trains_on_an_nvidia_gpu():
    """device_type=gpu on NVIDIA's OpenCL runtime: the vendor LightGBM announced is NVIDIA's, and NVML saw the
    fit's process on device 0. On PoCL's CPU device both fail."""
    from pipeline.models.lightgbm_build import opencl_gpu_platforms

    if not opencl_gpu_platforms():
        pytest.skip("no OpenCL platform with a GPU device (NVIDIA's driver registers one as nvidia.icd)")
    skip_without_opencl_learner()
    out = lightgbm_fit_in_a_child({"device_type": "gpu", "num_iterations": 50, "verbosity": -1})
    assert out["rounds"] > 0
    assert "NVIDIA" in (out["vendor"] or ""), out
    assert out["peak_gpu"] > 0 and out["nvml_devices"] == [0], out


def test_lightgbm_cuda_learner_trains_on_the_gpu():
    """device_type=cuda (make install-gpu): NVML saw the fit's process on device 0; with no device visible
    the same fit fails instead of training on the CPU."""
    from pipeline.models.lightgbm_build import cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if reason is not None:
        pytest.skip(f"no CUDA learner in this LightGBM ({reason}); build it with `make install-gpu`")
    params = {"device_type": "cuda", "num_iterations": 50, "verbosity": -1}
    out = lightgbm_fit_in_a_child(params)
    assert out["rounds"] > 0 and out["peak_gpu"] > 0 and out["nvml_devices"] == [0], out
    with pytest.raises(AssertionError):
        lightgbm_fit_in_a_child(params, env={"CUDA_VISIBLE_DEVICES": ""})


def test_gbm_gpu_lightgbm_fits_are_repeatable_on_the_gpu(adult, compose):
    """model=gbm_gpu's LightGBM params (gpu_use_dp) on NVIDIA's OpenCL runtime: three fits with one seed, one
    model. In single precision the test ROC AUC on bio_train varied from 0.99388 to 0.99464 on an H100."""
    from pipeline.models.lightgbm_gpu import probe
    from pipeline.settings import read_settings

    from pipeline.models.lightgbm_build import opencl_gpu_device

    chosen = opencl_gpu_device(0)  # the platform and device index the engine gives a fit on GPU 0
    if not chosen:
        pytest.skip("no OpenCL platform with a GPU device: PoCL's CPU device would not test the GPU's repeatability")
    skip_without_opencl_learner()
    error = probe({"device_type": "gpu", **chosen}, {"CUDA_VISIBLE_DEVICES": "0"})
    if error is not None:
        pytest.skip(f"no OpenCL device for LightGBM ({error})")
    (spec,) = [s for s in read_settings(compose(["model=gbm_gpu"])).models if s.name == "lightgbm"]
    params = spec.on("cuda").params  # as on the GPU: gbm_gpu's gpu_params laid over its params
    params.update(num_iterations=100, early_stopping_round=0, verbosity=-1)
    test = adult.X.iloc[adult.test_idx]
    models = [fit(LightGBMModel(params, "lightgbm"), adult) for _ in range(3)]
    vendors = [getattr(m, "device_vendor_", None) or "" for m in models]
    assert all("NVIDIA" in vendor for vendor in vendors), vendors
    predictions = [m.predict_proba(test) for m in models]
    assert all(np.array_equal(predictions[0], p) for p in predictions[1:]), \
        max(float(np.abs(predictions[0] - p).max()) for p in predictions[1:])


def run_dirs(workdir: Path):
    return sorted((workdir / "outputs" / "runs").glob("*/*"))


def test_two_half_gpu_network_fits_share_one_device(cli, tmp_path):
    # device=cuda: on 20,000 rows device=auto would choose the CPU, which packs nothing on the GPU
    cli("+hardware=1gpu", "model=nn_gpu", "model.nn.device=cuda", "parallelism.num_folds=2",
        "parallelism.fit.num_gpus=0.5", "parallelism.fit.num_cpus=1", "data.max_rows=20000",
        "model.nn.params.max_epochs=3", "tracking=none", check=True, timeout=600)
    (run_dir,) = run_dirs(tmp_path)
    timeline = json.loads((run_dir / "timeline.json").read_text())
    assert len(timeline) == 2
    assert all(e["device_ids"] == [0] and e["gpu_shares"] == [0.5] for e in timeline)
    a, b = sorted(timeline, key=lambda e: e["start"])
    assert b["start"] < a["end"]  # packed: both on GPU 0 at once
    assert all(e["nvml_devices"] == [0] for e in timeline), timeline  # NVML saw each fit's process there


def overlap(a: dict, b: dict) -> float:
    return min(a["end"], b["end"]) - max(a["start"], b["start"])


@pytest.mark.skipif("device_count() < 2", reason="needs two CUDA devices")
def test_gbm_fits_on_two_devices_at_once(cli, tmp_path):
    """Two XGBoost folds, a device each: NVML saw them on different devices, and their times overlap."""
    cli("+hardware=2gpu", "model=xgboost", "model.xgboost.device=cuda", "parallelism.num_folds=2",
        "parallelism.fit.num_gpus=1", "parallelism.fit.num_cpus=1", "executor.in_process=never",
        "data=synthetic", "data.rows=300000", "model.xgboost.params.num_boost_round=300",
        "model.xgboost.params.early_stopping_rounds=null", "tracking=none", check=True, timeout=600)
    (run_dir,) = run_dirs(tmp_path)
    timeline = json.loads((run_dir / "timeline.json").read_text())
    a, b = [e for e in timeline if e["task"].startswith("fit/xgboost/")]
    assert overlap(a, b) > 0.5 * min(a["end"] - a["start"], b["end"] - b["start"]), (a, b)
    assert sorted(a["nvml_devices"] + b["nvml_devices"]) == [0, 1], (a, b)
    assert a["nvml_devices"] == a["device_ids"] and b["nvml_devices"] == b["device_ids"]


def test_a_gpu_fit_runs_beside_a_cpu_fit(cli, tmp_path):
    """model=gbm_gpu with LightGBM on the CPUs: XGBoost on the GPU holds 1 thread, and both fit at once."""
    cli("+hardware=1gpu", "model=gbm_gpu", "model.lightgbm.device=cpu", "model.xgboost.device=cuda", "data=synthetic",
        "data.rows=300000", "model.xgboost.params.num_boost_round=300", "model.lightgbm.params.num_iterations=300",
        "tracking=none", check=True, timeout=600)
    (run_dir,) = run_dirs(tmp_path)
    timeline = json.loads((run_dir / "timeline.json").read_text())
    fits = {e["model"]: e for e in timeline if e["task"].startswith("fit/")}
    assert fits["xgboost"]["num_cpus"] == 1 and fits["xgboost"]["nvml_devices"] == [0]
    assert overlap(fits["xgboost"], fits["lightgbm"]) > 0


@pytest.mark.skipif("device_count() < 2")
def test_ddp_on_two_gpus_matches_one_gpu():
    import torch

    from pipeline.metrics import METRICS
    from pipeline.nn.ddp import fit_distributed
    from pipeline.nn.loop import Arrays, Loop, LoopConfig, NetSpec

    g = torch.Generator().manual_seed(0)
    n = 4096
    x, c = torch.randn(n, 8, generator=g), torch.randint(0, 4, (n, 1), generator=g)
    y = (x[:, 0] > 0).long()
    arrays = Arrays(x, c, y, x[:512], c[:512], y[:512])
    spec = NetSpec(8, (4,), 2, (64,), 0.0, 4)
    base = dict(max_epochs=2, patience=0, lr_scaling="none", learning_rate=0.01, batch_size_by_rows=False)
    one = Loop(spec, LoopConfig(batch_size=512, **base), "binary", METRICS["accuracy"], torch.device("cuda:0"),
               seed=1).run(arrays)
    two = fit_distributed((0, 1), spec, LoopConfig(batch_size=256, **base), "binary", METRICS["accuracy"], arrays,
                          backend="nccl", seed=1)
    for k in one.state_dict:
        np.testing.assert_allclose(one.state_dict[k].cpu().numpy(), two.state_dict[k].cpu().numpy(), atol=1e-4)


@pytest.mark.parametrize("model,overrides", [
    ("nn_gpu", ["model.nn.params.max_epochs=1"]),
    ("xgboost", ["model.xgboost.device=cuda", "model.xgboost.params.num_boost_round=20"]),
])
def test_gpu_memory_estimates_are_within_a_factor_of_two_of_the_measured_peaks(cli, tmp_path, model, overrides):
    """The GPU estimate (CUDA context, device matrix or tensors, activations) beside NVML's peak for the
    fit's process, on 1M synthetic rows; memory.json keeps both figures for the record."""
    cli("+hardware=1gpu", f"model={model}", *overrides, "data=synthetic", "data.rows=1000000",
        "executor.in_process=never", "tracking=none", timeout=600, check=True)
    (row,) = json.loads(next((tmp_path / "outputs" / "runs").glob("*/*/memory.json")).read_text())
    assert row["peak_gpu_mb"] > 0, row
    assert 0.5 <= row["estimate_gpu_mb"] / row["peak_gpu_mb"] <= 2.0, row
