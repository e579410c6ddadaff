"""The device map over fake visibility: CUDA_VISIBLE_DEVICES lists, Ray-assigned ids, UUID and MIG tokens."""

from fractions import Fraction as F

import pytest

from pipeline import hardware
from pipeline.accelerators import cuda as devices, nvml
from pipeline.errors import HardwareError
from pipeline.config import HardwareConf
from pipeline.hardware import resolve

NVML = [("GPU-aaaa1111-0000", "A100", 80), ("GPU-bbbb2222-0000", "A100", 80),
        ("GPU-cccc3333-0000", "H100", 80), ("GPU-dddd4444-0000", "H100", 80)]


@pytest.fixture
def four_gpus(monkeypatch):
    """A fake NVML with four devices; CUDA_VISIBLE_DEVICES as each test sets it."""
    monkeypatch.delenv(hardware.SIMULATE_ENV, raising=False)
    monkeypatch.delenv(hardware.SLOT_CPUS_ENV, raising=False)
    monkeypatch.delenv(hardware.SLOT_GPUS_ENV, raising=False)
    monkeypatch.delenv(devices.VISIBLE, raising=False)
    monkeypatch.setattr(nvml, "nvml_devices", lambda: list(NVML))
    return monkeypatch


class TestVisibility:
    def test_indices_keep_their_physical_token(self, four_gpus):
        four_gpus.setenv(devices.VISIBLE, "2,3")
        machine = hardware.detect()
        assert machine.gpu_tokens == ("2", "3") and machine.gpu_names == ("H100", "H100")

    def test_uuid_and_uuid_prefix_tokens_are_matched(self, four_gpus):
        four_gpus.setenv(devices.VISIBLE, "GPU-dddd4444-0000,GPU-bbbb")
        machine = hardware.detect()
        assert machine.gpu_tokens == ("GPU-dddd4444-0000", "GPU-bbbb")
        assert machine.gpu_names == ("H100", "A100")

    def test_a_token_naming_no_device_is_an_error_not_dropped(self, four_gpus):
        four_gpus.setenv(devices.VISIBLE, "1,GPU-ffff")
        with pytest.raises(HardwareError, match=r"'GPU-ffff' names no GPU of this machine"):
            hardware.detect()

    def test_one_mig_instance_is_one_device(self, four_gpus):
        four_gpus.setenv(devices.VISIBLE, "MIG-5c89e3f5-8b4c-5a3b-9a0c-1d2e3f405060")
        machine = hardware.detect()
        assert machine.num_gpus == 1 and machine.gpu_names == ("MIG instance",)

    def test_several_mig_instances_are_refused(self, four_gpus):
        four_gpus.setenv(devices.VISIBLE, "MIG-aaaa,MIG-bbbb")
        with pytest.raises(HardwareError, match="a CUDA process sees a single MIG instance"):
            hardware.detect()

    def test_minus_one_hides_every_device(self, four_gpus):
        four_gpus.setenv(devices.VISIBLE, "-1")
        assert hardware.detect().num_gpus == 0

    def test_garbage_is_an_error(self):
        with pytest.raises(HardwareError, match="neither a device index"):
            devices.parse_visible("0,gpu1")


class TestOrder:
    def test_detect_pins_pci_order(self, four_gpus):
        four_gpus.setenv(devices.ORDER, "FASTEST_FIRST")
        import os

        hardware.detect()
        assert os.environ[devices.ORDER] == "PCI_BUS_ID"

    def test_worker_environment_pins_the_order(self):
        assert devices.child_env(["3"]) == {"CUDA_VISIBLE_DEVICES": "3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


class TestMap:
    def test_worker_of_the_driver_subset_sees_physical_tokens(self, four_gpus):
        """The driver sees GPUs 2 and 3 as plan ids 0 and 1; a worker for plan id 1 gets token '3'."""
        four_gpus.setenv(devices.VISIBLE, "2,3")
        hw = resolve(None, hardware.detect(), dry_run=False)
        assert hw.devices == (0, 1)
        assert hw.visible_devices((1,)) == "3"
        assert devices.local_ordinals((1,), sees_only_its_devices=True) == (0,)

    def test_uuid_tokens_travel_to_workers(self, four_gpus):
        four_gpus.setenv(devices.VISIBLE, "GPU-cccc3333-0000,GPU-aaaa1111-0000")
        hw = resolve(None, hardware.detect(), dry_run=False)
        assert hw.visible_devices((0, 1)) == "GPU-cccc3333-0000,GPU-aaaa1111-0000"

    def test_in_process_uses_the_plan_ids_as_ordinals(self):
        assert devices.local_ordinals((2, 3), sees_only_its_devices=False) == (2, 3)

    def test_ddp_rank_takes_its_own_planned_device(self):
        local = devices.local_ordinals((2, 3), sees_only_its_devices=False)
        assert [devices.torch_device(local, rank) for rank in range(2)] == ["cuda:2", "cuda:3"]

    def test_library_devices(self):
        from pipeline.models import LightGBMModel, XGBoostModel

        assert XGBoostModel.profile.gpu_params((1,)) == {"device": "cuda:1"}
        assert LightGBMModel.profile.gpu_params((0,)) == {"gpu_device_id": 0}

    def test_ray_assigned_ids_are_ordinals_from_zero(self):
        tokens, local = devices.ray_task_devices([5, 7])
        assert tokens == ("5", "7") and local == (0, 1)

    def test_declared_devices_pick_physical_tokens(self, four_gpus):
        hw = resolve(HardwareConf(name="2gpu", num_gpus=2, devices=[2, 3]), hardware.detect(), dry_run=False)
        assert hw.devices == (2, 3) and hw.visible_devices((3,)) == "3"
        assert hw.capacities() == {2: F(1), 3: F(1)}


def test_in_process_ddp_trains_on_the_planned_devices(monkeypatch):
    """A two-GPU network fit with hardware.devices=[2,3], in-process: its ranks get cuda:2 and cuda:3."""
    import numpy as np
    import pandas as pd

    import pipeline.nn.ddp as ddp
    from pipeline.executors.local import InProcessBackend
    from pipeline.models.base import FitContext, Placement
    from pipeline.models.nn import TorchMLPModel

    seen = {}

    class Stop(Exception):
        pass

    def capture(devices_arg, *args, **kwargs):
        seen["devices"] = tuple(devices_arg)
        raise Stop

    monkeypatch.setattr(ddp, "fit_distributed", capture)
    request_local = devices.local_ordinals((2, 3), sees_only_its_devices=False)  # what InProcessBackend sets
    assert InProcessBackend.__module__ == "pipeline.executors.local"
    X = pd.DataFrame({"a": np.arange(40, dtype=float)})
    y = np.arange(40) % 2
    ctx = FitContext("binary", 2, Placement(1, (2, 3), request_local, F(2)))
    with pytest.raises(Stop):
        TorchMLPModel({"max_epochs": 1}, "nn").fit(X, y, X, y, ctx)
    assert seen["devices"] == (2, 3)
    assert [devices.torch_device(seen["devices"], r) for r in (0, 1)] == ["cuda:2", "cuda:3"]


class TestDevicesUsedTag:
    def test_one_machine_names_physical_tokens(self):
        fits = [{"host": "vm", "node": "", "device_ids": [1]}, {"host": "vm", "node": "", "device_ids": [0]}]
        assert devices.devices_used(fits, lambda ids: ",".join(f"GPU-{i}" for i in ids)) == "GPU-0,GPU-1"

    def test_two_nodes_are_named_per_node(self):
        """Ray ids are per node: '0' on two nodes is two devices, not one."""
        fits = [{"host": "a", "node": "11112222aaaa", "device_ids": [0]},
                {"host": "a", "node": "33334444bbbb", "device_ids": [0]},
                {"host": "a", "node": "33334444bbbb", "device_ids": [1]}]
        assert devices.devices_used(fits, str) == "a/11112222:0 a/33334444:0,1"

    def test_no_gpu(self):
        assert devices.devices_used([{"host": "vm", "node": "", "device_ids": []}], str) == "none"


def test_the_lightgbm_check_runs_with_the_first_fits_devices(monkeypatch):
    """hardware.devices=[2,3] of four GPUs: the check's child process sees GPU 2, the first fit's, not device 0."""
    from pipeline.graph.plan import build_plan
    from pipeline.resources import ModelNeeds, Request
    from pipeline.planning.allocation import allocate
    from pipeline.checks import first_fit_env

    monkeypatch.setenv(hardware.SIMULATE_ENV, "4")
    monkeypatch.delenv(devices.VISIBLE, raising=False)
    hw = resolve(HardwareConf(name="2gpu", num_gpus=2, devices=[2, 3]), hardware.detect(), dry_run=False)
    needs = ModelNeeds("lightgbm", True, True, 1, "params.device_type=gpu", "LightGBM")
    a = allocate(hw.total, Request.parse(None, None, "parallelism.bag"), Request.parse(None, None, "parallelism.fit"),
                 needs, num_folds=2, num_trials=1, gpu_capacities=list(hw.capacities().values()))
    env = first_fit_env(build_plan(hw, [a]), "lightgbm")
    assert env == {"CUDA_VISIBLE_DEVICES": "2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_a_machine_without_gpus_ignores_what_cuda_visible_devices_holds(monkeypatch):
    """SLURM sets CUDA_VISIBLE_DEVICES=NoDevFiles for a job without GPUs: no GPU, no error."""
    monkeypatch.delenv(hardware.SIMULATE_ENV, raising=False)
    monkeypatch.setattr(nvml, "nvml_devices", lambda: [])
    monkeypatch.setattr(nvml, "nvidia_smi_devices", lambda: [])
    monkeypatch.setenv(devices.VISIBLE, "NoDevFiles")
    assert hardware.detect().num_gpus == 0
