"""Memory estimates of one fit, before any fit, from the data's shape and the model's parameters.

An estimate is the peak a worker process reaches while it fits one fold and predicts: the
interpreter and the libraries it imported, the whole prepared table it reads, the fold's
copies, and what the library builds (GBMs: the binned matrix, gradients, histograms, trees;
the network: parameters, optimizer state, a batch's activations, the tensors it trains from).
On a GPU the estimate is what the fit holds on each of its devices, the CUDA context included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

from pipeline.memory.shape import DataShape
from pipeline.nn.options import DEFAULTS as NETWORK_DEFAULTS
from pipeline.nn.options import EVAL_BATCH, activation_bytes, embedding_dim

MiB = 2**20
GiB = 2**30

# Resident memory of a worker: the interpreter with numpy, pandas, scikit-learn and the engine,
# then each model library it imports (measured on Linux, CPython 3.11).
CORE_BYTES = 150 * MiB
LIBRARY_BYTES = {"lightgbm": 25 * MiB, "xgboost": 35 * MiB, "torch": 170 * MiB}
CUDA_CONTEXT_BYTES = 450 * MiB  # what a process's CUDA context takes on its device (NVML counts it)
CUDA_HOST_BYTES = {"torch": 1024 * MiB, "xgboost": 512 * MiB, "lightgbm": 256 * MiB}  # host RAM of the GPU runtime


@dataclass(frozen=True)
class FitShape:
    """Rows one fit learns from, holds out and predicts, and the table they come from."""

    train: int
    held_out: int
    test: int
    data: DataShape

    @classmethod
    def of(cls, data: DataShape, num_folds: int, test_size: float, val_size: float) -> "FitShape":
        test = data.test_rows if data.test_rows is not None else int(math.ceil(data.rows * test_size))
        rest = data.rows - test
        if num_folds >= 2:
            held = int(math.ceil(rest / num_folds))
        else:
            held = int(math.ceil(rest * val_size))
        return cls(rest - held, held, test, data)

    @property
    def features(self) -> int:
        return self.data.features

    @property
    def classes(self) -> int:
        """Outputs per row: one per class above two, one for binary and regression."""
        return self.data.classes if self.data.classes > 2 else 1


@dataclass(frozen=True)
class Estimate:
    """Bytes of one fit: resident memory of its process, and memory on each of its GPUs."""

    ram: int
    gpu: int = 0
    parts: dict = field(default_factory=dict, compare=False)  # name -> bytes, what the RAM estimate adds up

    def to_json(self) -> dict:
        return {"ram_mb": round(self.ram / MiB, 1), "gpu_mb": round(self.gpu / MiB, 1),
                "parts_mb": {k: round(v / MiB, 1) for k, v in self.parts.items()}}


def worker_bytes(libraries: Iterable[str]) -> int:
    """A fit process before it reads data: the interpreter and the libraries it preloads."""
    return CORE_BYTES + sum(LIBRARY_BYTES.get(lib, 0) for lib in set(libraries))


def common_parts(fit: FitShape, libraries: Iterable[str]) -> dict:
    """What every fit holds besides its library's own structures: the process, the prepared table
    (each worker reads all of it) and the fold's own copies of its rows."""
    row = fit.data.row_bytes
    return {
        "process": worker_bytes(libraries),
        "table": fit.data.table_bytes,
        "fold_copies": (fit.train + fit.held_out) * row,
    }


def generic(params: dict, fit: FitShape, on_gpu: bool) -> Estimate:
    """A model that states nothing: three copies of its training rows as floats."""
    return Estimate(0, 0, {"model": 3 * fit.train * fit.features * 8})


# --------------------------------------------------------------------------- GBMs


def lightgbm(params: dict, fit: FitShape, on_gpu: bool) -> Estimate:
    p, k = fit.features, fit.classes
    max_bin = int(params.get("max_bin", 255))
    leaves = int(params.get("num_leaves", 31))
    rounds = int(params.get("num_iterations", params.get("num_boost_round", 100)))
    bin_bytes = 0.5 if max_bin <= 15 else (1 if max_bin <= 255 else 2)
    parts = {
        # lgb.Dataset turns the frame into one float32 array, then bins it (uint8 per value)
        "dataset": int((fit.train + fit.held_out) * p * (4 + bin_bytes)),
        "gradients": fit.train * k * 8 + (fit.train + fit.held_out) * k * 8,
        "histograms": leaves * p * (max_bin + 1) * 16,
        "trees": rounds * k * leaves * 120,
        "predict": (fit.held_out + fit.test) * (p * 8 + k * 8),
    }
    gpu = 0
    if on_gpu:
        gpu = CUDA_CONTEXT_BYTES // 2 + int(fit.train * p * bin_bytes) + fit.train * k * 8 + parts["histograms"]
        parts["gpu_runtime"] = CUDA_HOST_BYTES["lightgbm"]
    return Estimate(0, gpu, parts)


def xgboost(params: dict, fit: FitShape, on_gpu: bool) -> Estimate:
    p, k = fit.features, fit.classes
    max_bin = int(params.get("max_bin", 256))
    depth = int(params.get("max_depth", 6)) or 6
    nodes = min(2 ** (min(depth, 16) + 1), 65_536)
    rounds = int(params.get("num_boost_round", 1000))
    hist = nodes * p * max_bin * 16
    parts = {
        # DMatrix keeps a CSR page (index + value per entry) of training and validation rows
        "dmatrix": (fit.train + fit.held_out) * (p * 8 + 8),
        "gradients": fit.train * k * 8 + (fit.train + fit.held_out) * k * 4,
        "trees": rounds * k * 2 ** min(depth, 12) * 40,
        "predict": (fit.held_out + fit.test) * (p * 8 + k * 4),
    }
    gpu = 0
    if on_gpu:
        symbol_bytes = math.ceil(math.log2(p * max_bin + 1)) / 8
        gpu = int(
            CUDA_CONTEXT_BYTES
            + fit.train * p * 8  # the CSR page copied to the device while the ELLPACK matrix is built
            + fit.train * p * symbol_bytes  # ELLPACK: a compressed bin index per value
            + fit.held_out * p * 8  # validation rows, predicted on the device
            + fit.train * k * 12 + fit.held_out * k * 4
            + hist
        )
        parts["gpu_runtime"] = CUDA_HOST_BYTES["xgboost"]
    else:
        parts["hist_index"] = fit.train * p * (1 if max_bin <= 256 else 2) + fit.train * 8
        parts["histograms"] = hist
    return Estimate(0, gpu, parts)


# --------------------------------------------------------------------------- the network


def network_size(params: dict, data: DataShape) -> tuple[int, int]:
    """(parameter count, input width) of the network (pipeline.nn.network.TabularMLP) for this data."""
    params = {**NETWORK_DEFAULTS, **params}
    card = data.cardinality + 1
    dim = embedding_dim(card, int(params["max_embedding_dim"]))
    width = data.numeric + data.categorical * dim
    count = data.categorical * card * dim
    w = width
    hidden = list(params["hidden_sizes"])
    for h in hidden:
        count += w * h + h + 2 * h
        w = h
    out = max(1, data.classes)
    count += w * out + out
    return count, width


def activation_bytes_per_row(params: dict, data: DataShape) -> int:
    params = {**NETWORK_DEFAULTS, **params}
    _, width = network_size(params, data)
    return activation_bytes(width, params["hidden_sizes"], data.categorical)


def network(params: dict, fit: FitShape, on_gpu: bool) -> Estimate:
    params = {**NETWORK_DEFAULTS, **params}
    data = fit.data
    count, width = network_size(params, data)
    batch = params["batch_size"]
    batch = int(params["max_batch_size"]) if batch == "auto" else int(batch)
    tensor_row = data.numeric * 4 + data.categorical * 8 + 8  # float32 numbers, int64 codes, the label
    widest = max(list(params["hidden_sizes"]) + [width])
    eval_rows = min(max(fit.held_out, fit.test), EVAL_BATCH)
    device_parts = {
        "tensors": (fit.train + fit.held_out) * tensor_row + fit.train * 8,  # and the epoch's permutation
        "parameters": count * 4 * 4,  # weights, gradients, AdamW's two moments
        "activations": min(batch, fit.train) * activation_bytes_per_row(params, data),
        "evaluation": eval_rows * (width + 3 * widest) * 4,
    }
    parts = {
        "encoding": fit.train * data.numeric * 4 * 3,  # the encoder's float copies while it fits
        "best_state": count * 4,
        "predict": (fit.held_out + fit.test) * tensor_row * 2,
    }
    if on_gpu:
        gpu = CUDA_CONTEXT_BYTES + sum(device_parts.values())
        parts["tensors"] = device_parts["tensors"]  # the CPU copies the device tensors come from
        parts["gpu_runtime"] = CUDA_HOST_BYTES["torch"]
        return Estimate(0, gpu, parts)
    return Estimate(0, 0, {**parts, **device_parts})
