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

MiB = 2**20
GiB = 2**30

# Resident memory of a fitting process: the interpreter with numpy, pandas, pyarrow and the engine,
# then each model library it imports (its profile's import_bytes), and scikit-learn with SciPy's statistics
# where a library imports them (a profile's `lean` modules, in a run that is not lean: pipeline.lean_imports).
# The core is a driver's, which fits a single-slot plan itself: 162 MiB at the fit's start beside Hydra, OmegaConf and rich (a forkserver
# child starts at 116-140 MiB, so a worker's estimate errs high); the same code's fixed part measured
# 30-45 MiB apart on two boxes of the same kind, and this sits between them.
CORE_BYTES = 160 * MiB
SKLEARN_BYTES = 66 * MiB
PREPARED_ROW_BYTES = 40  # per row beside its values: the encoded label, the split's indices, what making them left
CUDA_CONTEXT_BYTES = 450 * MiB  # what a process's CUDA context takes on its device (NVML counts it)


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


def worker_bytes(profiles: Iterable, lean: bool = True) -> int:
    """A fit process before it reads data: the interpreter and the libraries of the model kinds
    (pipeline.models.profile.ModelProfile) it preloads (without scikit-learn where `lean`)."""
    profiles = list(dict.fromkeys(profiles))
    sklearn = 0 if lean or not any(p.lean for p in profiles) else SKLEARN_BYTES
    return CORE_BYTES + sum(p.import_bytes for p in profiles) + sklearn


def common_parts(fit: FitShape, profiles: Iterable, lean: bool = True) -> dict:
    """What every fit holds besides its own structures: the process (the run's model kinds' profiles)
    and the prepared table (a worker maps all of it)."""
    return {
        "process": worker_bytes(profiles, lean),
        "table": fit.data.rows * (fit.data.row_bytes + PREPARED_ROW_BYTES),
    }


def stack_bytes(fit: FitShape, columns: int) -> int:
    """A stacked fit's columns from the level below (pipeline.graph.stacking), float32 for every row of the
    table: the array its request brings, and the copy the frame joining them to the table's holds."""
    return 2 * fit.data.rows * columns * 4


def feature_bytes(fit: FitShape) -> int:
    """Bytes of one row's features as the engine types them: float32 numbers, int8 category codes."""
    return fit.data.row_bytes - 8
