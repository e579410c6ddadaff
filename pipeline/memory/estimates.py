"""Memory estimates of one fit, before any fit, from the data's shape and the model's parameters.

An estimate is the peak a fitting process reaches while it fits one fold and predicts: the
interpreter and the libraries it imported, the whole prepared table (its numbers, labels and split
indices, and what preparing them left behind), and the fold's own structures at the moment they
peak. A fold's rows are copied only where the library reads them and dropped once it has built its
own matrix, so a GBM peaks while it bins: the rows' copies, the bin-finding sample and the binned
matrix; the network while it evaluates: the tensors it trains from and a batch's activations. The
constants were measured on Linux, CPython 3.11, 200k to 10M rows (the scale benchmark checks them).
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

# Resident memory of a fitting process: the interpreter with numpy, pandas, pyarrow and the engine,
# then each model library it imports, and scikit-learn with SciPy's statistics where LightGBM or XGBoost
# imports them (a run that is not lean: pipeline.lean_imports). The core is a driver's, which fits a
# single-slot plan itself: 162 MiB at the fit's start beside Hydra, OmegaConf and rich (a forkserver
# child starts at 116-140 MiB, so a worker's estimate errs high); the same code's fixed part measured
# 30-45 MiB apart on two boxes of the same kind, and this sits between them.
CORE_BYTES = 160 * MiB
LIBRARY_BYTES = {"lightgbm": 17 * MiB, "xgboost": 40 * MiB, "torch": 170 * MiB}
SKLEARN_BYTES = 66 * MiB
TORCH_RUNTIME_BYTES = 100 * MiB  # torch's thread pools and BLAS buffers once it computes on the CPU
PREPARED_ROW_BYTES = 40  # per row beside its values: the encoded label, the split's indices, what making them left
BIN_SAMPLE_ROWS = 200_000  # LightGBM's bin_construct_sample_cnt: rows it samples to find the bins
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


def worker_bytes(libraries: Iterable[str], lean: bool = True) -> int:
    """A fit process before it reads data: the interpreter and the libraries it preloads (without
    scikit-learn where `lean`)."""
    libraries = set(libraries)
    sklearn = 0 if lean or not libraries & {"lightgbm", "xgboost"} else SKLEARN_BYTES
    return CORE_BYTES + sum(LIBRARY_BYTES.get(lib, 0) for lib in libraries) + sklearn


def common_parts(fit: FitShape, libraries: Iterable[str], lean: bool = True) -> dict:
    """What every fit holds besides its own structures: the process and the prepared table (a
    worker maps all of it)."""
    return {
        "process": worker_bytes(libraries, lean),
        "table": fit.data.rows * (fit.data.row_bytes + PREPARED_ROW_BYTES),
    }


def stack_bytes(fit: FitShape, columns: int) -> int:
    """A stacked fit's columns from the level below (pipeline.graph.stacking), float32 for every row of the
    table: the array its request brings, and the copy the frame joining them to the table's holds."""
    return 2 * fit.data.rows * columns * 4


def feature_bytes(fit: FitShape) -> int:
    """Bytes of one row's features as the engine types them: float32 numbers, int8 category codes."""
    return fit.data.row_bytes - 8


def generic(params: dict, fit: FitShape, on_gpu: bool) -> Estimate:
    """A model that states nothing: the frames of its rows, and three copies of its training rows
    as floats."""
    return Estimate(0, 0, {"fold_copies": (fit.train + fit.held_out) * feature_bytes(fit),
                           "model": 3 * fit.train * fit.features * 8})


# --------------------------------------------------------------------------- GBMs


def lightgbm(params: dict, fit: FitShape, on_gpu: bool) -> Estimate:
    p, k = fit.features, fit.classes
    max_bin = int(params.get("max_bin", 255))
    leaves = int(params.get("num_leaves", 31))
    rounds = int(params.get("num_iterations", params.get("num_boost_round", 100)))
    sample = int(params.get("bin_construct_sample_cnt", BIN_SAMPLE_ROWS))
    bin_bytes = 0.5 if max_bin <= 15 else (1 if max_bin <= 255 else 2)
    rows = fit.train + fit.held_out
    parts = {
        # the datasets bin the frames of their rows (read in place) and drop them once binned
        "fold_copies": rows * feature_bytes(fit),
        "bin_sample": min(fit.train, sample) * p * 8,  # the sampled values, as doubles, the bins come from
        "binned": int(rows * p * bin_bytes),
        "gradients": fit.train * k * 8,
        "histograms": leaves * p * (max_bin + 1) * 16,
        "trees": rounds * k * leaves * 120,
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
    csr = p * 8 + 8  # a DMatrix's entry per value (index and value) and row pointer
    parts = {"trees": rounds * k * 2 ** min(depth, 12) * 40}
    gpu = 0
    if on_gpu:
        parts.update(fold_copies=(fit.train + fit.held_out) * feature_bytes(fit),
                     dmatrix=(fit.train + fit.held_out) * csr, gradients=fit.train * k * 8 + fit.held_out * k * 4)
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
        # the training rows' frame while the QuantileDMatrix bins it, then the validation DMatrix
        parts.update(
            fold_copies=fit.train * feature_bytes(fit),
            quantized=fit.train * (p * (1 if max_bin <= 256 else 2) + 24),  # bins, row pointers, sketch entries
            gradients=fit.train * k * 8 + (fit.train + fit.held_out) * k * 4,
            histograms=hist,
        )
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
        # the rows' numbers are gathered once into these (the encoder fills and scales them in place)
        "tensors": (fit.train + fit.held_out) * tensor_row + fit.train * 8,  # and the epoch's permutation
        "parameters": count * 4 * 4,  # weights, gradients, AdamW's two moments
        "activations": min(batch, fit.train) * activation_bytes_per_row(params, data),
        "evaluation": eval_rows * (width + 2 * widest) * 4,  # a batch's input and two layers' outputs
    }
    parts = {"best_state": count * 4}
    if on_gpu:
        gpu = CUDA_CONTEXT_BYTES + sum(device_parts.values())
        parts["tensors"] = device_parts["tensors"]  # the CPU copies the device tensors come from
        parts["gpu_runtime"] = CUDA_HOST_BYTES["torch"]
        return Estimate(0, gpu, parts)
    return Estimate(0, 0, {**parts, **device_parts, "cpu_runtime": TORCH_RUNTIME_BYTES})
