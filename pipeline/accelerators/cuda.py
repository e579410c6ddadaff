"""NVIDIA's CUDA devices, and the one map from the plan's device ids to what a process and its libraries see.

The plan numbers GPUs 0..n-1 in the order this machine's NVML lists them (PCI bus order). A
process started by the engine sees devices through `CUDA_VISIBLE_DEVICES` (worker processes, Ray
tasks) or sees the driver's own devices (the in-process backend); CUDA numbers what it sees from
0, in PCI order only when `CUDA_DEVICE_ORDER=PCI_BUS_ID` (its default is fastest first). Every
backend and model goes through this module: `child_env` for a process's environment,
`local_ordinals` for the ordinals a fit uses, and `torch_device` for torch's device (a model kind's
profile maps ordinals to its own library's parameters); `CUDAAccelerator` answers for CUDA in the
registry, with detection and process memory from NVML (pipeline.accelerators.nvml).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Callable, Iterable, Mapping, MutableMapping, Optional, Sequence

from pipeline.accelerators.base import Accelerator, Device, ProcessMemory
from pipeline.accelerators import nvml
from pipeline.errors import HardwareError

log = logging.getLogger(__name__)

VISIBLE = "CUDA_VISIBLE_DEVICES"
ORDER = "CUDA_DEVICE_ORDER"
PCI_ORDER = "PCI_BUS_ID"

_INDEX = re.compile(r"^\d+$")
_UUID = re.compile(r"^GPU-[0-9a-fA-F-]+$")
_MIG = re.compile(r"^MIG-")


def pin_order(environ: MutableMapping[str, str] = os.environ) -> None:
    """Make CUDA number devices in PCI bus order, as NVML (and so the plan) does."""
    current = environ.get(ORDER)
    if current not in (None, "", PCI_ORDER):
        log.warning("%s=%s: set to %s so that CUDA ordinals match the plan's device ids (NVML order)",
                    ORDER, current, PCI_ORDER)
    environ[ORDER] = PCI_ORDER


def token_kind(token: str) -> str:
    """'index', 'uuid' or 'mig' for one CUDA_VISIBLE_DEVICES entry; HardwareError otherwise."""
    if _INDEX.match(token):
        return "index"
    if _UUID.match(token):
        return "uuid"
    if _MIG.match(token):
        return "mig"
    raise HardwareError(
        f"{VISIBLE} holds {token!r}, which is neither a device index (0, 1), a GPU UUID (GPU-...) "
        "nor a MIG UUID (MIG-...)"
    )


def parse_visible(value: Optional[str]) -> Optional[tuple[str, ...]]:
    """The tokens of a CUDA_VISIBLE_DEVICES value (None: unset, every device visible).

    As CUDA does, the list ends at an empty entry or a negative index ("-1" hides every device);
    any other entry that is not an index or a UUID is an error rather than a silent cut. Several MIG
    instances are refused: a CUDA process enumerates at most one MIG instance.
    """
    if value is None:
        return None
    tokens = []
    for raw in value.split(","):
        token = raw.strip()
        if not token or re.match(r"^-\d+$", token):
            break
        token_kind(token)
        tokens.append(token)
    migs = [t for t in tokens if token_kind(t) == "mig"]
    if migs and len(tokens) > 1:
        raise HardwareError(
            f"{VISIBLE}={value}: a CUDA process sees a single MIG instance, so {len(tokens)} devices including "
            f"MIG instance(s) {', '.join(migs)} cannot be used together; show one MIG instance per job "
            "(e.g. with Hydra's GPU launcher, one job per instance)"
        )
    return tuple(tokens)


def match_token(token: str, uuids: Sequence[str]) -> Optional[int]:
    """The NVML index a token names: an index, or a GPU UUID (or a unique prefix of one, as CUDA allows)."""
    kind = token_kind(token)
    if kind == "index":
        index = int(token)
        return index if index < len(uuids) else None
    if kind == "uuid":
        hits = [i for i, u in enumerate(uuids) if u.lower().startswith(token.lower())]
        return hits[0] if len(hits) == 1 else None
    return None


def child_env(tokens: Sequence[str]) -> dict[str, str]:
    """The environment that shows a process exactly these devices (tokens as the driver sees them)."""
    return {VISIBLE: ",".join(tokens), ORDER: PCI_ORDER}


def local_ordinals(gpu_ids: Sequence[int], sees_only_its_devices: bool) -> tuple[int, ...]:
    """The CUDA ordinals, inside the process running a fit, of the plan devices `gpu_ids`.

    A worker process or Ray task sees exactly its devices (CUDA_VISIBLE_DEVICES), numbered from 0;
    the in-process backend sees the driver's devices, where plan id i is ordinal i.
    """
    return tuple(range(len(gpu_ids))) if sees_only_its_devices else tuple(gpu_ids)


def torch_device(local: Sequence[int], rank: int = 0) -> str:
    """torch device of one rank of a fit: its own device among the fit's ordinals."""
    return f"cuda:{local[rank]}" if local else "cpu"


def ray_task_devices(ray_gpu_ids: Sequence[object]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(the ids Ray assigned, as CUDA_VISIBLE_DEVICES tokens; the ordinals the task uses)."""
    tokens = tuple(str(i) for i in ray_gpu_ids)
    return tokens, tuple(range(len(tokens)))


def visible_tokens(environ: Mapping[str, str] = os.environ) -> Optional[tuple[str, ...]]:
    return parse_visible(environ.get(VISIBLE))


def devices_used(fits: Iterable[dict], plan_tokens: Callable[[list[int]], str]) -> str:
    """The devices the fits ran on, for the run's `pipeline.gpu_ids` tag: this machine's physical
    tokens, or `host/node:ids` per Ray node when the fits ran on several (ids as each node numbers them)."""
    on_gpu = [f for f in fits if f["device_ids"]]
    if not on_gpu:
        return "none"
    nodes: dict[tuple[str, str], set[str]] = {}
    for f in on_gpu:
        nodes.setdefault((f["host"], f.get("node") or ""), set()).update(map(str, f["device_ids"]))
    if len(nodes) == 1:
        return plan_tokens(sorted({d for f in on_gpu for d in f["device_ids"]}))
    return " ".join(
        f"{host}/{node[:8]}:{','.join(sorted(ids, key=_natural))}" if node else f"{host}:{','.join(sorted(ids, key=_natural))}"
        for (host, node), ids in sorted(nodes.items())
    )


def _natural(token: str):
    return (0, int(token), "") if token.isdigit() else (1, 0, token)


# ---------------------------------------------------------------------- the accelerator
class CUDAAccelerator(Accelerator):
    """NVIDIA GPUs through CUDA: every library the engine trains with has a CUDA build."""

    name = "cuda"
    label = "CUDA"
    torch_type = "cuda"
    plan_device = "cuda"
    visible_vars = (VISIBLE,)
    fp16 = True
    fused_optimizer = True

    def detect(self) -> tuple[Device, ...]:
        return tuple(Device(*g) for g in nvml.nvml_devices() or nvml.nvidia_smi_devices())

    def parse_devices(self, value: Optional[str]) -> Optional[tuple[str, ...]]:
        return parse_visible(value)

    def visible_env(self, tokens: Sequence[str]) -> dict[str, str]:
        return child_env(tokens)

    def memory_probe(self) -> Optional[ProcessMemory]:
        return nvml.NvmlProcess.open()

    # torch's CUDA calls (a ROCm build of torch answers them too, for its HIP devices)
    def setup_device(self, device) -> None:
        import torch

        torch.cuda.set_device(device)

    def synchronize(self, device) -> None:
        import torch

        torch.cuda.synchronize(device)

    def reset_peak_memory(self, device) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats(device)

    def peak_memory(self, device) -> Optional[int]:
        import torch

        return torch.cuda.max_memory_allocated(device)

    def free_memory(self, device) -> Optional[int]:
        import torch

        return torch.cuda.mem_get_info(device)[0]

    def empty_cache(self, device) -> None:
        import torch

        torch.cuda.empty_cache()

    def rng_state(self, device):
        import torch

        return torch.cuda.get_rng_state(device)

    def set_rng_state(self, state, device) -> None:
        import torch

        if state is not None:
            torch.cuda.set_rng_state(state, device)

    def ddp_device_ids(self, device) -> Optional[list[int]]:
        return [device.index]

    def torch_peaks(self) -> Optional[int]:
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return None
        return max((torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())), default=0)

    def reset_torch_peaks(self) -> None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            for i in range(torch.cuda.device_count()):
                torch.cuda.reset_peak_memory_stats(i)
