"""Memory estimates of one fit of the engine's own model kinds (each its profile's `memory`), before any
fit, from the data's shape and the model's parameters: the fold's own structures at their peak
(pipeline.memory.estimates says what a fit holds besides them and how the constants were measured).
"""

from __future__ import annotations

import math

from pipeline.memory.estimates import CUDA_CONTEXT_BYTES, MiB, Estimate, FitShape, feature_bytes
from pipeline.memory.shape import DataShape
from pipeline.nn.options import DEFAULTS as NETWORK_DEFAULTS
from pipeline.nn.options import EVAL_BATCH, activation_bytes, embedding_dim, embedding_floats

# Resident memory each library adds to a fitting process once imported (profiles' import_bytes), and the
# host RAM of its GPU runtime in a fit on a GPU (profiles' gpu_host_bytes)
LIGHTGBM_IMPORT_BYTES, LIGHTGBM_GPU_HOST_BYTES = 17 * MiB, 256 * MiB
XGBOOST_IMPORT_BYTES, XGBOOST_GPU_HOST_BYTES = 40 * MiB, 512 * MiB
TORCH_IMPORT_BYTES, TORCH_GPU_HOST_BYTES = 170 * MiB, 1024 * MiB
TORCH_RUNTIME_BYTES = 100 * MiB  # torch's thread pools and BLAS buffers once it computes on the CPU
BIN_SAMPLE_ROWS = 200_000  # LightGBM's bin_construct_sample_cnt: rows it samples to find the bins


# --------------------------------------------------------------------------- GBMs


def lightgbm(params: dict, fit: FitShape, on_gpu: bool) -> Estimate:
    p, k = fit.features, fit.classes
    max_bin = int(params.get("max_bin", 255))
    # a tree has at most a leaf per min_data_in_leaf training rows: a small table's trees stay small however
    # many rounds the cap allows
    leaves = int(params.get("num_leaves", 31))
    least = int(params.get("min_data_in_leaf", params.get("min_child_samples", 20))) or 1
    tree_leaves = max(2, min(leaves, fit.train // least))
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
        "trees": rounds * k * tree_leaves * 120,
    }
    gpu = 0
    if on_gpu:
        gpu = CUDA_CONTEXT_BYTES // 2 + int(fit.train * p * bin_bytes) + fit.train * k * 8 + parts["histograms"]
        parts["gpu_runtime"] = LIGHTGBM_GPU_HOST_BYTES
    return Estimate(0, gpu, parts)


def xgboost(params: dict, fit: FitShape, on_gpu: bool) -> Estimate:
    p, k = fit.features, fit.classes
    max_bin = int(params.get("max_bin", 256))
    depth = int(params.get("max_depth", 6)) or 6
    nodes = min(2 ** (min(depth, 16) + 1), 65_536)
    rounds = int(params.get("num_boost_round", 1000))
    hist = nodes * p * max_bin * 16
    csr = p * 8 + 8  # a DMatrix's entry per value (index and value) and row pointer
    leaves = max(2, min(2 ** min(depth, 12), fit.train))  # a leaf holds a row at least
    parts = {"trees": rounds * k * leaves * 40}
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
        parts["gpu_runtime"] = XGBOOST_GPU_HOST_BYTES
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
    count = data.categorical * card * dim
    numeric_width = data.numeric
    if params["numeric_embedding"] == "periodic" and data.numeric:
        k, d = int(params["embedding_frequencies"]), int(params["numeric_embedding_dim"])
        numeric_width = data.numeric * d
        count += data.numeric * k + 2 * k * d + d  # the frequencies and the shared linear map
    width = numeric_width + data.categorical * dim
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
    embedded = embedding_floats(data.numeric, params)
    return activation_bytes(width, params["hidden_sizes"], data.categorical, embedded)


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
        parts["gpu_runtime"] = TORCH_GPU_HOST_BYTES
        return Estimate(0, gpu, parts)
    return Estimate(0, 0, {**parts, **device_parts, "cpu_runtime": TORCH_RUNTIME_BYTES})
