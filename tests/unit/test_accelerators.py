"""The accelerator registry over fakes: ROCm through a fake AMD SMI and rocm-smi, MPS through a faked
platform and torch.mps, a ROCm torch through torch.version.hip; the model/accelerator pairs refused."""

import json
import os
import sys
from types import SimpleNamespace

import pytest
import torch

from pipeline import accelerators, hardware
from pipeline.accelerators import mps, nvml, rocm
from pipeline import models
from pipeline.errors import ConfigError
from pipeline.models import LightGBMModel, TorchMLPModel, XGBoostModel
from pipeline.models.profile import ModelProfile

AMD = [("GPU-a1a1", "AMD Instinct MI300X", 192 << 30), ("GPU-b2b2", "AMD Instinct MI300X", 192 << 30),
       ("GPU-c3c3", "AMD Instinct MI250", 64 << 30)]


def fake_amdsmi(devices=AMD, processes=None):
    """An `amdsmi` module listing `devices`; `processes`: {device index: [process dicts]}."""
    processes = processes or {}
    return SimpleNamespace(
        amdsmi_init=lambda *a: None, amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: list(range(len(devices))),
        amdsmi_get_gpu_asic_info=lambda h: {"market_name": devices[h][1]},
        amdsmi_get_gpu_device_uuid=lambda h: devices[h][0],
        amdsmi_get_gpu_memory_total=lambda h, kind: devices[h][2] if kind == "VRAM" else 0,
        AmdSmiMemoryType=SimpleNamespace(VRAM="VRAM"),
        amdsmi_get_gpu_process_list=lambda h: processes.get(h, []),
        amdsmi_get_gpu_process_info=lambda h, p: p.info,
    )


@pytest.fixture
def clean(monkeypatch):
    """No NVIDIA device, no AMD one, not a Mac, no visibility variable; detection afresh."""
    for var in (hardware.SIMULATE_ENV, hardware.SLOT_CPUS_ENV, hardware.SLOT_GPUS_ENV, "SLURM_JOB_ID",
                "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(nvml, "nvml_devices", lambda: [])
    monkeypatch.setattr(nvml, "nvidia_smi_devices", lambda: [])
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import fails
    monkeypatch.setattr(rocm.shutil, "which", lambda name: None)
    monkeypatch.setattr(mps, "is_apple_silicon", lambda: False)
    accelerators.machine_gpu.cache_clear()
    yield monkeypatch
    accelerators.machine_gpu.cache_clear()


@pytest.fixture
def amd(clean):
    clean.setitem(sys.modules, "amdsmi", fake_amdsmi())
    return clean


@pytest.fixture
def mac(clean):
    clean.setattr(mps, "is_apple_silicon", lambda: True)
    return clean


class TestRegistry:
    def test_the_device_names_come_from_the_registry(self):
        assert accelerators.DEVICE_CHOICES == ("auto", "cpu", "cuda", "rocm", "mps")
        assert accelerators.PLAN_DEVICES == ("auto", "cpu", "cuda")
        assert {name: a.plan_device for name, a in accelerators.REGISTRY.items()} == {
            "cpu": "cpu", "cuda": "cuda", "rocm": "cuda", "mps": "cuda"}

    def test_an_unknown_device_names_the_key_the_value_and_the_choices(self):
        expected = r"model.nn.device='tpu' is not a device; use one of auto, cpu, cuda, rocm, mps"
        with pytest.raises(ConfigError, match=expected):
            accelerators.check_device("tpu", "model.nn.device", TorchMLPModel.profile)

    @pytest.mark.parametrize("kind", ["LightGBMModel", "XGBoostModel"])
    def test_a_gbm_on_mps_is_refused_before_any_work(self, kind):
        profile = getattr(models, kind).profile
        expected = (rf"model.m.device=mps: {profile.library} has no build that runs on MPS; "
                    r"use one of auto, cpu, cuda, rocm$")
        with pytest.raises(ConfigError, match=expected):
            accelerators.check_device("MPS", "model.m.device", profile)

    def test_the_pairs_libraries_can_run_are_planned_as_a_gpu_fit(self):
        assert accelerators.check_device("mps", "k", TorchMLPModel.profile) == "cuda"
        assert accelerators.check_device("rocm", "k", XGBoostModel.profile) == "cuda"
        assert accelerators.check_device("rocm", "k", LightGBMModel.profile) == "cuda"
        assert accelerators.check_device(" Cuda ", "k", LightGBMModel.profile) == "cuda"
        assert accelerators.check_device("cpu", "k", XGBoostModel.profile) == "cpu"

    def test_a_users_own_library_is_not_judged(self):
        assert accelerators.check_device("mps", "k", ModelProfile("MyBoost")) == "cuda"
        assert accelerators.check_device("mps", "k", None) == "cuda"

    def test_auto_keeps_a_gbm_off_an_mps_machine_and_says_so(self, mac, caplog):
        assert accelerators.check_device("auto", "model.lightgbm.device", LightGBMModel.profile) == "cpu"
        assert "model.lightgbm.device=auto: LightGBM has no MPS build, so it runs on the CPU" in caplog.text
        assert accelerators.check_device("auto", "model.nn.device", TorchMLPModel.profile) == "auto"

    def test_auto_elsewhere_stays_auto(self, clean):
        assert accelerators.check_device("auto", "model.lightgbm.device", LightGBMModel.profile) == "auto"

    def test_the_cli_refuses_lightgbm_on_mps_naming_the_key(self, compose):
        from pipeline.settings import read_settings

        expected = r"model.lightgbm.device=mps: LightGBM has no build that runs on MPS"
        with pytest.raises(ConfigError, match=expected):
            read_settings(compose(["model=lightgbm", "model.lightgbm.device=mps"]))

    def test_the_networks_own_device_parameter_takes_the_plans_devices(self):
        from pipeline.nn.options import check

        assert check({"device": "cuda"})["device"] == "cuda"
        with pytest.raises(ConfigError, match=r"params.device='mps' is not one of auto, cpu, cuda"):
            check({"device": "mps"})


class TestROCm:
    def test_amd_smi_finds_the_devices_when_nvml_finds_none(self, amd):
        accelerator, found = accelerators.detect_gpus()
        assert accelerator.name == "rocm"
        assert [(d.token, d.name, d.memory) for d in found] == AMD
        machine = hardware.detect()
        assert machine.gpu_tokens == ("0", "1", "2") and machine.gpu_names[2] == "AMD Instinct MI250"
        assert machine.gpu_memory == (192 << 30, 192 << 30, 64 << 30)

    def test_nvml_is_asked_first(self, amd):
        amd.setattr(nvml, "nvml_devices", lambda: [("GPU-n1", "H100", 80 << 30)])
        assert accelerators.detect_gpus()[0].name == "cuda"

    @pytest.mark.parametrize("var", ["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"])
    def test_each_rocm_visibility_variable_restricts_the_machine(self, amd, var):
        amd.setenv(var, "2,GPU-a1")
        machine = hardware.detect()
        assert machine.gpu_tokens == ("2", "GPU-a1")
        assert machine.gpu_names == ("AMD Instinct MI250", "AMD Instinct MI300X")

    def test_rocr_is_read_before_hip(self, amd):
        amd.setenv("ROCR_VISIBLE_DEVICES", "1")
        amd.setenv("HIP_VISIBLE_DEVICES", "0")
        assert accelerators.get("rocm").visible_tokens() == ("1",)

    def test_a_token_naming_no_amd_device_names_the_variable(self, amd):
        from pipeline.errors import HardwareError

        amd.setenv("HIP_VISIBLE_DEVICES", "7")
        expected = r"HIP_VISIBLE_DEVICES=7: '7' names no GPU of this machine \(ROCm lists 3"
        with pytest.raises(HardwareError, match=expected):
            hardware.detect()

    def test_a_child_is_shown_its_devices_through_hip(self):
        assert accelerators.get("rocm").visible_env(["0", "2"]) == {"HIP_VISIBLE_DEVICES": "0,2"}
        assert accelerators.get("cuda").visible_env(["3"]) == {"CUDA_VISIBLE_DEVICES": "3",
                                                              "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        assert accelerators.get("mps").visible_env(["0"]) == {}

    def test_rocm_smi_answers_without_the_python_module(self, clean):
        card = {"Card Series": "MI210", "VRAM Total Memory (B)": "68702699520"}
        cards = {"card1": {**card, "Unique ID": "0xbb"}, "card0": {**card, "Unique ID": "0xaa"},
                 "system": {"Driver version": "6.8"}}
        smi = "/opt/rocm/bin/rocm-smi"
        clean.setattr(rocm.shutil, "which", lambda name: smi if name == "rocm-smi" else None)
        clean.setattr(rocm.subprocess, "run", lambda *a, **k: SimpleNamespace(stdout=json.dumps(cards)))
        found = accelerators.get("rocm").detect()
        assert [(d.token, d.name, d.memory) for d in found] == [("0xaa", "MI210", 68702699520),
                                                                 ("0xbb", "MI210", 68702699520)]

    @pytest.mark.parametrize("as_handles", [False, True])
    def test_amd_smi_reports_this_process_memory_and_device(self, clean, as_handles):
        from pipeline.memory.measure import PeakMemory

        me = os.getpid()

        def process(pid, vram):
            info = {"pid": pid, "memory_usage": {"vram_mem": vram}}
            return SimpleNamespace(info=info) if as_handles else info  # AMD SMI 6.x: handles; 7.x: dicts

        on = {0: [process(me + 1, 9 << 20)], 2: [process(me, 5 << 20)]}
        clean.setitem(sys.modules, "amdsmi", fake_amdsmi(processes=on))
        with PeakMemory(gpu=True) as peak:
            pass
        assert peak.gpu == 5 << 20 and peak.gpu_devices == {2}

    def test_a_rocm_torch_device_is_the_rocm_accelerator(self, monkeypatch):
        monkeypatch.setattr(torch.version, "hip", None)
        assert accelerators.for_torch(torch.device("cuda", 0)).name == "cuda"
        monkeypatch.setattr(torch.version, "hip", "6.2.41133")
        rocm_acc = accelerators.for_torch(torch.device("cuda", 1))
        assert rocm_acc.name == "rocm" and rocm_acc.label == "ROCm"
        assert rocm_acc.torch_device((1, 3), rank=1) == "cuda:3"  # HIP devices are torch's `cuda`
        assert rocm_acc.ddp_device_ids(torch.device("cuda", 1)) == [1]


class TestMPS:
    def test_found_on_apple_silicon_only(self, clean):
        assert accelerators.get("mps").detect() == ()
        clean.setattr(mps, "is_apple_silicon", lambda: True)
        (device,) = accelerators.get("mps").detect()
        assert device.token == "0" and device.memory > 0  # its memory is the machine's
        assert accelerators.detect_gpus()[0].name == "mps"
        assert hardware.detect().gpu_tokens == ("0",)

    def test_the_network_is_given_mps(self, mac):
        assert accelerators.torch_device((0,)) == "mps"
        assert accelerators.torch_device(()) == "cpu"
        assert accelerators.for_torch(torch.device("mps")).name == "mps"
        assert accelerators.for_torch(torch.device("cpu")).name == "cpu"

    def test_elsewhere_the_network_is_given_cuda_ordinals(self, clean):
        assert accelerators.torch_device((2, 3), rank=1) == "cuda:3"

    def test_the_metal_drivers_allocation_is_the_process_memory(self, mac):
        from pipeline.memory.measure import PeakMemory

        mac.setitem(sys.modules, "pynvml", None)
        mac.setattr(torch.backends.mps, "is_available", lambda: True)
        mac.setattr(torch.mps, "driver_allocated_memory", lambda: 7 << 20)
        with PeakMemory(gpu=True) as peak:
            pass
        assert peak.gpu == 7 << 20 and peak.gpu_devices == {0}

    def test_no_fp16_scaler_nor_free_memory_figure(self):
        acc = accelerators.get("mps")
        assert not acc.fp16 and acc.free_memory(torch.device("mps")) is None
        assert acc.peak_memory(torch.device("mps")) is None


class Recording(accelerators.Accelerator):
    """A CPU in disguise that records what the loop asks of its accelerator."""

    name, label, torch_type, plan_device = "rec", "REC", "cpu", "cpu"
    libraries = frozenset({"PyTorch"})
    fused_optimizer = True

    def __init__(self):
        self.calls = []

    def detect(self):
        return ()

    def __getattribute__(self, attr):
        value = object.__getattribute__(self, attr)
        if attr in ("synchronize", "reset_peak_memory", "peak_memory", "rng_state", "free_memory"):
            object.__getattribute__(self, "calls").append(attr)
        return value


def test_the_loop_asks_its_accelerator_not_torch_cuda(monkeypatch, tmp_path):
    """Synchronising, peak memory, the RNG state and the batch search's memory come from the accelerator."""
    from pipeline.metrics import METRICS
    from pipeline.nn.loop import Arrays, Loop, LoopConfig, NetSpec

    g = torch.Generator().manual_seed(0)
    x, c = torch.randn(256, 3, generator=g), torch.randint(0, 4, (256, 1), generator=g)
    y = (x[:, 0] > 0).long()
    spec = NetSpec(num_numeric=3, cardinalities=(4,), out_dim=2, hidden_sizes=(8,), dropout=0.0,
                   max_embedding_dim=2)
    rec = Recording()
    monkeypatch.setattr("pipeline.nn.loop.for_torch", lambda device: rec)
    Loop(spec, LoopConfig(batch_size="auto", max_epochs=2, patience=0), "binary", METRICS["accuracy"],
         torch.device("cpu"), checkpoint_dir=tmp_path).run(Arrays(x, c, y, x[:64], c[:64], y[:64]))
    assert rec.calls.count("synchronize") == 2 and rec.calls.count("peak_memory") == 2
    assert rec.calls.count("rng_state") == 2 and {"reset_peak_memory", "free_memory"} <= set(rec.calls)


def test_torch_allocator_peaks_count_where_torch_started_a_gpu(clean):
    """A fit that used torch on a GPU: each started device's peak is reset first, the largest one kept."""
    from pipeline.memory.measure import PeakMemory

    reset = []
    clean.setattr(torch.cuda, "is_initialized", lambda: True)
    clean.setattr(torch.cuda, "device_count", lambda: 2)
    clean.setattr(torch.cuda, "reset_peak_memory_stats", reset.append)
    clean.setattr(torch.cuda, "max_memory_allocated", lambda i: (3 << 20, 8 << 20)[i])
    clean.setitem(sys.modules, "pynvml", None)
    with PeakMemory(gpu=True) as peak:
        pass
    assert reset == [0, 1] and peak.gpu == 8 << 20
    with PeakMemory(gpu=False) as cpu_only:
        pass
    assert cpu_only.gpu == 0
