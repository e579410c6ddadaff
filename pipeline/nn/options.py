"""The network's parameters (`model.<name>.params`): their names, defaults, allowed values and checks.

The one place they are validated. It imports no torch, so a dry run and the planner check a
network's parameters without it; the model (`pipeline.models.nn`) and the loop both use it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, fields
from typing import Union

from pipeline.accelerators import PLAN_DEVICES
from pipeline.errors import ConfigError, closest
from pipeline.said_once import say_once

log = logging.getLogger(__name__)

DEFAULTS = {
    "device": "auto",
    "hidden_sizes": [256, 128],
    "dropout": 0.1,
    "max_embedding_dim": 16,
    "numeric_scaling": "standard",
    "numeric_embedding": "none",
    "embedding_frequencies": 16,
    "frequency_scale": 1.0,
    "numeric_embedding_dim": 16,
    "learning_rate": 1e-3,
    "weight_decay": 1e-5,
    "batch_size": 512,
    "batch_size_by_rows": True,
    "max_batch_size": 16_384,
    "max_epochs": 100,
    "patience": 10,
    "patience_growth": 0.0,
    "monitor": "val_loss",
    "regression_loss": "mse",
    "y_range_extend": 0.05,
    "precision": "32",
    "lr_scaling": "linear",
    "accumulate_grad_batches": 1,
    "compile": False,
}
COMPILE_MODES = {False: None, True: "default", "default": "default", "reduce-overhead": "reduce-overhead",
                 "max-autotune": "max-autotune"}  # params.compile -> torch.compile's mode (None: eager)
PRECISIONS = {"32": None, "16-mixed": "float16", "bf16-mixed": "bfloat16"}  # Lightning's names -> autocast dtype
LR_SCALING = {"none": lambda n: 1.0, "linear": float, "sqrt": math.sqrt}  # learning-rate factor for n devices
# params.numeric_scaling: each number minus the training mean over the std, or first to the normal quantile
# of its rank among the training values (pipeline.nn.encoding.TabularEncoder)
NUMERIC_SCALINGS = ("standard", "quantile")
NUMERIC_EMBEDDINGS = ("none", "periodic")  # numbers as they are, or each through pipeline.nn.network.PeriodicEmbedding
# params.monitor: what chooses the kept epoch and counts the patience: the validation loss (log loss, or the
# squared error), or the run's eval metric. A rank or label metric over a fold's few positives jumps
# between epochs: on a table with 3% positives a fold kept its first epoch (ROC AUC 0.942, log loss 0.119)
# over later ones (log loss 0.086).
MONITORS = ("val_loss", "eval_metric")
# params.regression_loss: what a regression network minimises on the standardised label: the squared error,
# the absolute error (AutoGluon's NN_TORCH), or Huber's (squared within one std of the label, absolute past it)
REGRESSION_LOSSES = ("mse", "l1", "huber")
EVAL_BATCH = 65_536  # rows the network scores at a time (validation, test, prediction)
_POSITIVE_INTS = ("max_epochs", "accumulate_grad_batches", "max_batch_size", "max_embedding_dim",
                  "embedding_frequencies", "numeric_embedding_dim")


def check(params: dict, key: str = "params") -> dict:
    """The parameters laid over DEFAULTS, or a ConfigError naming `key.<name>`, the value and what is valid."""
    for name in params:
        if name not in DEFAULTS:
            raise ConfigError(
                f"{key}.{name} is not a parameter of the network{closest(name, DEFAULTS)}; "
                f"parameters: {', '.join(DEFAULTS)}"
            )
    p = {**DEFAULTS, **params}
    _choice(key, "device", str(p["device"]).lower(), PLAN_DEVICES)
    _choice(key, "precision", str(p["precision"]), PRECISIONS)
    _choice(key, "lr_scaling", p["lr_scaling"], LR_SCALING)
    _choice(key, "numeric_scaling", p["numeric_scaling"], NUMERIC_SCALINGS)
    _choice(key, "numeric_embedding", p["numeric_embedding"], NUMERIC_EMBEDDINGS)
    _choice(key, "monitor", p["monitor"], MONITORS)
    _choice(key, "regression_loss", p["regression_loss"], REGRESSION_LOSSES)
    batch = p["batch_size"]
    if batch != "auto" and not _is_int(batch, 1):
        raise ConfigError(f"{key}.batch_size={batch!r} must be a positive integer or 'auto'")
    if not isinstance(p["batch_size_by_rows"], bool):
        raise ConfigError(f"{key}.batch_size_by_rows={p['batch_size_by_rows']!r} must be true or false")
    for name in _POSITIVE_INTS:
        if not _is_int(p[name], 1):
            raise ConfigError(f"{key}.{name}={p[name]!r} must be an integer >= 1")
    if not _is_int(p["patience"], 0):
        raise ConfigError(f"{key}.patience={p['patience']!r} must be an integer >= 0 (0: no early stopping)")
    if not _number(key, "patience_growth", p["patience_growth"]) >= 0:
        raise ConfigError(f"{key}.patience_growth={p['patience_growth']!r} must be >= 0 (epochs of patience "
                          "added per epoch before the best one; 0: patience stays fixed)")
    from pipeline.label_range import check_extend

    check_extend(p["y_range_extend"], f"{key}.y_range_extend")
    if not 0 <= _number(key, "dropout", p["dropout"]) < 1:
        raise ConfigError(f"{key}.dropout={p['dropout']!r} must be in [0, 1)")
    if not _number(key, "learning_rate", p["learning_rate"]) > 0:
        raise ConfigError(f"{key}.learning_rate={p['learning_rate']!r} must be > 0")
    if not _number(key, "frequency_scale", p["frequency_scale"]) > 0:
        raise ConfigError(f"{key}.frequency_scale={p['frequency_scale']!r} must be > 0 (the spread of the "
                          "periodic embedding's first frequencies)")
    if not _number(key, "weight_decay", p["weight_decay"]) >= 0:
        raise ConfigError(f"{key}.weight_decay={p['weight_decay']!r} must be >= 0")
    if not isinstance(p["compile"], (bool, str)) or p["compile"] not in COMPILE_MODES:
        raise ConfigError(f"{key}.compile={p['compile']!r} must be false, true (torch.compile's default mode), "
                          "reduce-overhead (CUDA graphs: one launch a step on a GPU) or max-autotune")
    hidden = p["hidden_sizes"]
    if isinstance(hidden, (str, bytes)) or not all(_is_int(h, 1) for h in _iterable(hidden)):
        raise ConfigError(f"{key}.hidden_sizes={hidden!r} must be a list of positive ints")
    return p


def check_precision(precision: str, has_fp16: bool, key: str = "params") -> None:
    """fp16 autocast needs a device with its gradient scaler and kernels (CUDA's, as ROCm's); bf16 runs
    on the CPU too. `has_fp16`: the fit's accelerator has them (Accelerator.fp16)."""
    if str(precision) == "16-mixed" and not has_fp16:
        raise ConfigError(
            f"{key}.precision=16-mixed needs a CUDA device but this fit has none; "
            "on the CPU use precision=bf16-mixed or 32"
        )


def watched(monitor: str, val_loss: float, score: float, greater_is_better: bool) -> float:
    """An epoch's figure for `monitor`, lower better: its validation loss, or its eval metric as a loss; the
    loss where the metric is undefined on the validation rows (ROC AUC on rows of one class: NaN at every
    epoch, which no epoch would beat, so the first was kept)."""
    if monitor == "val_loss" or score != score:
        return val_loss
    return -score if greater_is_better else score


def optimizer_options(fused: bool) -> dict:
    """AdamW's fused implementation where the accelerator has one (Accelerator.fused_optimizer): on CUDA
    one launch updates every parameter, where the for-each path launches several a step; on the CPU
    one pass over each parameter (a network fit on Adult takes 8% less time)."""
    return {"fused": True} if fused else {}


def scaled_lr(lr: float, world_size: int, rule: str) -> float:
    """The learning rate for `world_size` devices: linear (x N) or sqrt (x sqrt N) in the global batch."""
    _choice("params", "lr_scaling", rule, LR_SCALING)
    return lr * LR_SCALING[rule](world_size)


SMALL_TABLE_ROWS = 100_000  # training rows under which batch_size_by_rows sizes the batch from them


def rows_batch(rows: int, ceiling: int) -> int:
    """The batch for `rows` training rows: under SMALL_TABLE_ROWS, as AutoGluon's network sizes it
    (2 ** (2 + the rows' digits): 16 under 100 rows, 32 under 1,000, 64 under 10,000, 128 under 100,000),
    never above `ceiling`; from there `ceiling`. At 512 rows a batch, a fold of 400 rows takes one optimizer
    step an epoch, and 30 epochs ended the fit while its validation loss still fell."""
    rows = max(int(rows), 1)
    return ceiling if rows >= SMALL_TABLE_ROWS else min(ceiling, 2 ** (2 + len(str(rows))))


def embedding_dim(cardinality: int, cap: int) -> int:
    """fast.ai's rule of thumb, capped: 1.6 * cardinality ** 0.56."""
    return max(1, min(cap, round(1.6 * cardinality**0.56)))


@dataclass(frozen=True)
class LoopConfig:
    """How the loop trains: the training half of the network's parameters, checked when built."""

    batch_size: Union[int, str] = DEFAULTS["batch_size"]  # per device, or "auto"
    batch_size_by_rows: bool = DEFAULTS["batch_size_by_rows"]  # a smaller batch on fewer rows (rows_batch)
    max_batch_size: int = DEFAULTS["max_batch_size"]
    max_epochs: int = DEFAULTS["max_epochs"]
    patience: int = DEFAULTS["patience"]
    # AutoGluon's adaptive early stopping (0.5 there): a fit whose best epoch came late waits longer
    patience_growth: float = DEFAULTS["patience_growth"]
    monitor: str = DEFAULTS["monitor"]
    regression_loss: str = DEFAULTS["regression_loss"]
    learning_rate: float = DEFAULTS["learning_rate"]
    weight_decay: float = DEFAULTS["weight_decay"]
    precision: str = DEFAULTS["precision"]
    accumulate_grad_batches: int = DEFAULTS["accumulate_grad_batches"]
    compile: Union[bool, str] = DEFAULTS["compile"]
    lr_scaling: str = DEFAULTS["lr_scaling"]

    def __post_init__(self):
        check({f.name: getattr(self, f.name) for f in fields(self)})

    def patience_at(self, best_epoch: int) -> float:
        """Epochs without a better monitored figure that end the fit, its best epoch (0-based) so far being
        `best_epoch`: `patience` + `patience_growth` x best_epoch (no early stopping where patience is 0)."""
        if self.patience <= 0:
            return float("inf")
        return self.patience + self.patience_growth * max(best_epoch, 0)

    def batch_for(self, rows: int) -> int:
        """An integer batch_size, or with batch_size_by_rows the smaller batch `rows` training rows get
        (`rows_batch`), said in the log the first time the run takes it."""
        batch = rows_batch(rows, self.batch_size) if self.batch_size_by_rows else self.batch_size
        if batch < self.batch_size:
            say_once(log, ("batch", batch, self.batch_size),
                     "batch_size=%d for %d training rows (batch_size_by_rows: batch_size=%d is the ceiling; "
                     "batch_size_by_rows=false keeps it)", batch, rows, self.batch_size)
        return batch

    @classmethod
    def from_params(cls, params: dict, key: str = "params") -> "LoopConfig":
        p = check(params, key)
        return cls(
            batch_size=p["batch_size"], batch_size_by_rows=p["batch_size_by_rows"],
            max_batch_size=p["max_batch_size"], max_epochs=p["max_epochs"],
            patience=p["patience"], patience_growth=float(p["patience_growth"]), monitor=p["monitor"],
            regression_loss=p["regression_loss"], learning_rate=float(p["learning_rate"]),
            weight_decay=float(p["weight_decay"]),
            precision=str(p["precision"]), accumulate_grad_batches=p["accumulate_grad_batches"],
            compile=p["compile"], lr_scaling=p["lr_scaling"],
        )


def _choice(key: str, name: str, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}.{name}={value!r} is not one of {', '.join(allowed)}")


def _is_int(value, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _number(key: str, name: str, value) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{key}.{name}={value!r} must be a number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}.{name}={value!r} must be a number") from None


def _iterable(value) -> tuple:
    try:
        return tuple(value)
    except TypeError:
        return (None,)


def activation_bytes(width: int, hidden_sizes, categorical: int, embedding_floats: int = 0) -> int:
    """Bytes a training step keeps per row of its batch: inputs, each layer's outputs (linear,
    norm, activation, dropout mask) and their gradients, in float32; the gathered codes and label;
    the numbers' embedding (`embedding_floats`)."""
    return (2 * width + 4 * sum(hidden_sizes) + embedding_floats) * 4 * 2 + categorical * 8 + 16


def embedding_floats(numeric: int, params: dict) -> int:
    """Floats a row's periodic embedding of its `numeric` numbers keeps for the backward pass: the
    angles, their cosines and sines, the linear map's output and its ReLU; none without one."""
    p = {**DEFAULTS, **params}
    if p["numeric_embedding"] != "periodic":
        return 0
    return numeric * (4 * int(p["embedding_frequencies"]) + 2 * int(p["numeric_embedding_dim"]))


def largest_batch(per_row: int, budget: int, cap: int) -> int:
    """The largest power of two whose activations (`per_row` bytes a row) fit in `budget` bytes;
    `cap` itself when it fits, and at least 1."""
    rows = max(1, budget // max(per_row, 1))
    return cap if rows >= cap else 2 ** int(math.log2(rows))
