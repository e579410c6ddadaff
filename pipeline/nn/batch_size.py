"""The network's batch size: the largest power of two a training step runs with on the device."""

from __future__ import annotations

import gc

import torch

from pipeline.accelerators import for_torch
from pipeline.errors import HardwareError


def find_batch_size(module, probe, n_rows: int, max_batch: int, device: torch.device, start: int = 32) -> int:
    """The largest power of two that runs a training step, as Lightning's `power` scaler searches."""
    cap = max(1, min(max_batch, n_rows))
    batch = min(start, cap)
    best = None
    while True:
        try:
            probe(batch)
            best = batch
        except torch.OutOfMemoryError:
            module.zero_grad(set_to_none=True)
            free_memory(device)
            if best is not None:
                break
            if batch == 1:
                label = for_torch(device).label
                raise HardwareError(f"{label} ran out of memory with a batch of 1 row; the network does not "
                                    "fit on the device") from None
            batch //= 2
            continue
        if batch >= cap:
            break
        batch = min(batch * 2, cap)
    return best


def free_memory(device: torch.device) -> None:
    gc.collect()
    for_torch(device).empty_cache(device)
