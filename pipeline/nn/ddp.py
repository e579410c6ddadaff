"""One network across several devices: a process per device, torch DistributedDataParallel.

NCCL on GPUs, gloo on CPUs (the same code path, which the tests run with 2 ranks). Ranks see
the same shuffled index and take their slice of each global batch; DDP averages the gradients.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import torch

from pipeline.accelerators import for_torch, torch_device
from pipeline.metrics import Metric
from pipeline.nn.loop import Arrays, Loop, LoopConfig, LoopResult, NetSpec
from pipeline.trusted import create_file, open_trusted


def fit_distributed(
    devices: Sequence[int],
    spec: NetSpec,
    config: LoopConfig,
    problem_type: str,
    metric: Metric,
    arrays: Arrays,
    *,
    backend: str = "nccl",
    seed: int = 0,
    checkpoint_dir: Optional[Path] = None,
    y_scale: tuple[float, float] = (0.0, 1.0),
    deadline: Optional[float] = None,
    scored_after: int = 0,
) -> LoopResult:
    """Train one rank per entry of `devices` (rank r on the GPU of ordinal devices[r] with nccl: the
    ordinals the plan gave the fit, as pipeline.accelerators maps them; every rank on the CPU with gloo);
    rank 0's result.

    Ranks meet through a file store (no TCP rendezvous server) and talk over the loopback interface:
    one machine, nothing listening beyond 127.0.0.1.
    """
    import torch.multiprocessing as mp

    world_size = len(devices)
    for t in vars(arrays).values():
        if t is not None:  # no row weights: None
            t.share_memory_()
    with tempfile.TemporaryDirectory(prefix="ddp-") as tmp:
        out = Path(tmp) / "result.pt"
        mp.start_processes(
            _rank_main,
            args=(world_size, tuple(devices), backend, str(Path(tmp) / "rendezvous"), spec, config, problem_type, metric, arrays,
                  seed, checkpoint_dir, y_scale, out, deadline, scored_after),
            nprocs=world_size,
            join=True,
            start_method="spawn",
        )
        with open_trusted(out) as fh:
            return LoopResult(**torch.load(fh, weights_only=True))


def _rank_main(rank, world_size, devices, backend, rendezvous, spec, config, problem_type, metric, arrays, seed,
               checkpoint_dir, y_scale, out, deadline=None, scored_after=0):
    import torch.distributed as dist

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    device = torch.device(torch_device(devices, rank)) if backend == "nccl" else torch.device("cpu")
    for_torch(device).setup_device(device)
    store = dist.FileStore(rendezvous, world_size)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
    try:
        loop = Loop(spec, config, problem_type, metric, device, seed=seed, rank=rank, world_size=world_size,
                    checkpoint_dir=checkpoint_dir, y_scale=y_scale, deadline=deadline,
                    scored_after=scored_after)
        result = loop.run(arrays)
        if rank == 0:  # its fields: tensors and plain values, which load with weights_only
            with create_file(out) as fh:
                torch.save(vars(result), fh)
        dist.barrier()
    finally:
        dist.destroy_process_group()
