"""Rows per second of the network: the engine's device-resident loop (`pipeline.nn.loop.Loop`) vs a
plain TensorDataset + DataLoader loop, fp32 and bf16-mixed, on this machine's device.

The DataLoader baseline indexes and collates every row on the CPU (~60k rows/s on a 16-core GPU box,
whatever the GPU), so it is measured on the first rows of each epoch only, over fewer epochs: a rate is
a rate, and six full epochs of 1.28M rows took 130 s per precision."""

from __future__ import annotations

import contextlib
import time

import statistics
from typing import Callable, Optional

from bench.common import Options, cpu_cores, figure, guarded, load_data, log, ratios

MEASURED = ("32", "bf16-mixed")  # the precisions a CPU and a GPU both run
COMPILED = "engine loop rows/s · compile=reduce-overhead"


BASELINE_EPOCHS = 3  # the DataLoader loop's: one warm-up, two measured


def settings_for(device: str, quick: bool) -> dict:
    """Batch sizes as the engine's configs set them: model=nn (CPU) and model=nn_gpu (CUDA). The
    DataLoader baseline stops each epoch after `baseline_rows_per_epoch` rows."""
    if device == "cuda":
        return {"rows": 200_000 if quick else 2_000_000, "batch_size": 4096, "epochs": 3 if quick else 6,
                "baseline_rows_per_epoch": 50_000 if quick else 250_000, "baseline_epochs": BASELINE_EPOCHS}
    return {"rows": 20_000 if quick else 200_000, "batch_size": 512, "epochs": 3 if quick else 6,
            "baseline_rows_per_epoch": 10_000 if quick else 50_000, "baseline_epochs": BASELINE_EPOCHS}


def baseline_note(s: dict) -> str:
    return (f"the first {s['baseline_rows_per_epoch']:,} rows of each epoch, {s['baseline_epochs']} epochs "
            "(the first a warm-up)")


def prepare(rows: int, scratch):
    """The engine's synthetic table, encoded by the engine's encoder: CPU tensors of train and validation rows."""
    import torch

    from pipeline.nn.encoding import TabularEncoder
    from pipeline.nn.loop import Arrays, NetSpec

    data, _ = load_data(["data=synthetic", f"data.rows={rows}", "data.features=20", "data.categorical_features=4"],
                        scratch / "engine")
    X = data.X
    enc = TabularEncoder().fit(X.iloc[data.train_idx])

    def tensors(idx):
        num, cat = enc.transform(X.iloc[idx])
        return torch.from_numpy(num), torch.from_numpy(cat), torch.as_tensor(data.y[idx], dtype=torch.long)

    arrays = Arrays(*tensors(data.train_idx), *tensors(data.val_idx))
    spec = NetSpec(num_numeric=len(enc.numeric), cardinalities=tuple(enc.cardinalities), out_dim=2)
    return arrays, spec


def engine_loop(arrays, spec, device, precision: str, batch: int, epochs: int, compile=False) -> list[float]:
    """rows/s of each training epoch, as the engine's loop records them (evaluation excluded)."""
    import torch

    from pipeline import metrics
    from pipeline.nn.loop import Loop, LoopConfig

    # the batch the plain loop has, whatever the rows
    config = LoopConfig(batch_size=batch, batch_size_by_rows=False, max_epochs=epochs, patience=0,
                        precision=precision, compile=compile)
    loop = Loop(spec, config, "binary", metrics.resolve("auto", "binary"), torch.device(device), seed=0)
    return list(loop.run(arrays).history["rows_per_second"])


def dataloader_loop(arrays, spec, device, precision: str, batch: int, epochs: int,
                    rows_per_epoch: Optional[int] = None) -> list[float]:
    """rows/s of each training epoch of a TensorDataset + DataLoader loop: same model, optimizer and batch;
    each epoch stops after `rows_per_epoch` rows (None: all)."""
    import torch
    from torch.nn import functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from pipeline.nn.options import PRECISIONS as DTYPES

    dev = torch.device(device)
    torch.manual_seed(0)
    model = spec.build().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-5)
    cuda = dev.type == "cuda"
    loader = DataLoader(TensorDataset(arrays.x_num, arrays.x_cat, arrays.y), batch_size=batch, shuffle=True,
                        pin_memory=cuda)
    dtype = getattr(torch, DTYPES[precision]) if DTYPES[precision] else None
    out = []
    model.train()
    for _ in range(epochs):
        t0 = time.perf_counter()
        rows = 0
        for xb, cb, yb in loader:
            xb, cb, yb = (t.to(dev, non_blocking=True) for t in (xb, cb, yb))
            opt.zero_grad(set_to_none=True)
            ctx = torch.autocast(dev.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
            with ctx:
                logits = model(xb, cb)
            loss = F.cross_entropy(logits.float(), yb)
            loss.backward()
            opt.step()
            rows += len(yb)
            if rows_per_epoch is not None and rows >= rows_per_epoch:
                break
        if cuda:
            torch.cuda.synchronize(dev)
        out.append(rows / (time.perf_counter() - t0))
    return out


def measure(opts: Options, device: str, group_prefix: str, device_name: str,
            emit: Optional[Callable[[list], None]] = None) -> tuple[list, dict]:
    """The figures and settings; `emit` gets each group's figures as soon as they are measured (both
    precisions first, compile=reduce-overhead, the slowest to measure, last)."""
    import torch

    s = settings_for(device, opts.quick)
    torch.set_num_threads(cpu_cores())
    arrays, spec = prepare(s["rows"], opts.scratch)
    figures = []

    def done(measured: list) -> None:
        figures.extend(measured)
        if emit is not None:
            emit(measured)

    eager = {}
    for precision in MEASURED:
        group = f"{group_prefix} · {'fp32' if precision == '32' else precision}"
        log(f"nn_loop: {group}")
        engine = engine_loop(arrays, spec, device, precision, s["batch_size"], s["epochs"])[1:]  # epoch 0: warm-up
        plain = dataloader_loop(arrays, spec, device, precision, s["batch_size"], s["baseline_epochs"],
                                s["baseline_rows_per_epoch"])[1:]
        eager[precision] = engine
        median = statistics.median(engine)
        done([
            figure("engine loop rows/s", engine, "rows/s", group=group, device=device_name),
            figure("DataLoader loop rows/s", plain, "rows/s", group=group, device=device_name,
                   measured_on=baseline_note(s)),
            figure("speed-up engine/DataLoader", [median / p for p in plain], "x", group=group,
                   device=device_name),
        ])
    if device == "cuda":  # the switch params.compile=reduce-overhead, measured
        group = f"{group_prefix} · fp32"
        log(f"nn_loop: {group} · compile=reduce-overhead")
        graphs = engine_loop(arrays, spec, device, "32", s["batch_size"], s["epochs"] + 1,
                             compile="reduce-overhead")[2:]  # epochs 0-1: compile and graph capture
        done([
            figure(COMPILED, graphs, "rows/s", group=group, device=device_name),
            figure("speed-up CUDA graphs/eager", ratios(graphs, eager["32"]), "x", group=group,
                   device=device_name),
        ])
    settings = dict(s, train_rows=len(arrays.y), features="20 (4 categorical, embedded)", device=device_name,
                    measured_epochs=s["epochs"] - 1, threads=cpu_cores(), optimizer="AdamW lr 1e-3",
                    network="TabularMLP hidden [256, 128], dropout 0.1", baseline=baseline_note(s))
    return figures, settings


SWEEP_BATCHES = (1024, 4096, 16384, 65536)
SWEEP_EPOCHS = 3  # the first a warm-up
PROFILED_STEPS = 50


def batch_sweep(opts: Options, device: str, group: str, device_name: str,
                batches=SWEEP_BATCHES) -> list[dict]:
    """What bounds the engine loop: its rows/s (eager, fp32) at several batch sizes, with the milliseconds
    per step (a rate that grows with the batch at a level time per step is bound by the host's work per
    step, not the device's arithmetic); then, on CUDA, the kernels one step launches and the share of
    its time the GPU spent in them (torch.profiler, at the engine's CUDA batch)."""
    s = settings_for(device, opts.quick)
    arrays, spec = prepare(s["rows"], opts.scratch)
    figures = []
    for batch in batches:
        log(f"nn_loop: {group} · batch {batch}")
        rates = engine_loop(arrays, spec, device, "32", batch, SWEEP_EPOCHS)[1:]
        figures += [
            figure(f"engine loop rows/s · batch {batch}", rates, "rows/s", group=group, device=device_name),
            figure(f"milliseconds per step · batch {batch}", [1000 * batch / r for r in rates], "ms",
                   group=group, device=device_name),
        ]
    if device == "cuda":
        batch = s["batch_size"]
        names = [f"CUDA kernels per step · batch {batch}", f"GPU busy share of the loop · batch {batch}"]
        figures += guarded(group, names, lambda: kernel_profile(arrays, spec, batch, group, device_name))
    return figures


def kernel_profile(arrays, spec, batch: int, group: str, device_name: str, device: str = "cuda") -> list[dict]:
    """CUDA kernels per training step and the GPU's busy share of the step's wall time, over
    PROFILED_STEPS steps of one epoch on as many rows (after a warm-up epoch outside the profile)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from pipeline.nn.loop import Arrays

    rows = batch * PROFILED_STEPS
    few = Arrays(arrays.x_num[:rows], arrays.x_cat[:rows], arrays.y[:rows],
                 arrays.v_num[:batch], arrays.v_cat[:batch], arrays.v_y[:batch])
    engine_loop(few, spec, device, "32", batch, 1)
    cuda = device == "cuda"
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        engine_loop(few, spec, device, "32", batch, 1)
        if cuda:
            torch.cuda.synchronize()
    wall_us = (time.perf_counter() - t0) * 1e6
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(e.time_range.elapsed_us() for e in kernels)  # a kernel event's range is on the device
    per_step = len(kernels) / PROFILED_STEPS
    return [
        figure(f"CUDA kernels per step · batch {batch}", [per_step], "", group=group, device=device_name,
               measured_on=f"{PROFILED_STEPS} steps and one evaluation, under torch.profiler"),
        figure(f"GPU busy share of the loop · batch {batch}", [busy_us / wall_us], "", group=group,
               device=device_name, measured_on="kernel time over the profiled epoch's wall time"),
    ]


def run(opts: Options) -> dict:
    import torch

    from bench.common import cpu_model

    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name(0) if device == "cuda" else cpu_model()
    figures, settings = measure(opts, device, device.upper(), name)
    return {
        "settings": settings,
        "figures": figures,
        "notes": ["rows/s per training epoch (evaluation excluded), median over the epochs after the first "
                  "(warm-up). The DataLoader loop is measured on " + settings["baseline"] + "; the speed-up "
                  "divides the engine loop's median by each of its measured epochs."],
    }
