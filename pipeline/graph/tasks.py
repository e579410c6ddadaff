"""What travels to a worker (FitRequest), what comes back (FoldResult), and the fit of one fold.

`run_fit` is the one function every backend calls: in the driver, in a worker process, in a
Ray task. It reads no config.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import time
import traceback
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Optional

import numpy as np

from pipeline.accelerators import local_ordinals
from pipeline.graph.datafile import resolve_data
from pipeline.graph.round_pruning import FoldPruner
from pipeline.memory.measure import PeakMemory
from pipeline.models.base import FitContext, Placement, TabularModel


@dataclass(frozen=True)
class DataRef:
    """The prepared data: a data file in the run directory (pipeline.graph.datafile), or the
    object itself (in-process, Ray).

    `fingerprint` is the data's (TabularData.fingerprint): a worker refuses a file written for other data.
    """

    path: Optional[str] = None
    obj: Any = field(default=None, compare=False, repr=False)
    fingerprint: str = ""


@dataclass(frozen=True)
class StackFeatures:
    """A stacked fit's extra columns (pipeline.graph.stacking): their names, and their values with a row per
    row of the data (NaN where the fit reads none); `digest` identifies them in the task's key."""

    columns: tuple[str, ...]
    values: np.ndarray = field(compare=False, repr=False)
    digest: str = ""

    @classmethod
    def of(cls, columns, values: np.ndarray) -> "StackFeatures":
        values = np.ascontiguousarray(values, dtype=np.float32)
        digest = hashlib.sha256(json.dumps(list(columns)).encode() + values.tobytes()).hexdigest()[:20]
        return cls(tuple(columns), values, digest)

    def join(self, X):
        """X with these columns after its own."""
        from pipeline.graph.stacking import join

        return join(X, self.columns, self.values)


@dataclass
class FitRequest:
    task_id: str
    key: str
    model: TabularModel  # unfitted prototype
    params: dict  # the trial's parameters, laid over the prototype's
    model_name: str
    trial: int
    fold: int
    num_folds: int
    fold_seed: int
    seed: int
    eval_metric: str
    num_cpus: int
    gpu_ids: tuple[int, ...]
    gpu_shares: tuple[Fraction, ...]
    data: DataRef
    checkpoint_dir: Optional[str] = None
    local_gpus: Optional[tuple[int, ...]] = None  # None: the worker sees exactly gpu_ids (CUDA_VISIBLE_DEVICES)
    pruning: bool = False
    prune_thresholds: tuple[tuple[int, float], ...] = ()  # (rung step, loss past which it stops): round_pruning
    deadline: Optional[float] = None  # time.time() the fit stops by (time_limit_s): absolute, as every host reads it
    fold_set: Optional[tuple[int, ...]] = None  # a stacked fit: learn outside these folds (() : every row)
    stack: Optional[StackFeatures] = None  # a stacked level's features from the level below
    class_weight: str = "none"  # data.class_weight


@dataclass
class FoldResult:
    task_id: str
    key: str
    model: TabularModel
    held_out: np.ndarray  # row indices the fold model did not learn from
    val_pred: np.ndarray
    test_pred: np.ndarray
    fit_seconds: float
    predict_seconds: float  # predicting the held-out rows (unless the fit kept their scores) and the test rows
    device: str
    start: float
    end: float
    pid: int
    host: str
    gpu_ids: tuple[int, ...] = ()
    node: str = ""  # the Ray node id, where a cluster may run several nodes on one host
    test_predict_seconds: Optional[float] = None  # the test rows alone (None: a result cached before it was kept)
    cuda_visible_devices: Optional[str] = None
    num_cpus: int = 1
    pruned: bool = False
    cached: bool = False
    attempt: int = 0
    curve: dict = field(default_factory=dict)  # step -> validation loss, as reported for pruning
    peak_ram: int = 0  # bytes: the fit process's peak resident memory while it fitted and predicted
    peak_gpu: int = 0  # bytes: its peak memory on its most used GPU
    nvml_devices: tuple = ()  # NVML's indices of the devices it saw the fit's process on
    stopped_by_budget: bool = False  # stopped at a round or epoch for the deadline: a usable, shorter model
    released: bool = False  # its model (and test predictions) let go: its trial cannot be chosen (graph.retention)
    # Stored for a released fit in place of its held-out predictions (graph.retention): its fold's score on
    # those rows (its trial stopped as losing) or its trial's score (scored, then pushed out of the ranks)
    fold_score: Optional[float] = None
    trial_score: Optional[float] = None


@dataclass
class TaskFailure:
    task_id: str
    message: str
    details: str = ""


def task_key(fingerprint: str, model: TabularModel, params: dict, fold: Optional[int], num_folds: int,
             fold_seed: int, seed: int, eval_metric: str, pruning: bool = False, device: str = "cpu",
             fold_set: Optional[tuple[int, ...]] = None, stack: Optional[StackFeatures] = None,
             class_weight: str = "none", scored_by: Optional[str] = None,
             fold_scheme: str = "by_class") -> str:
    """A hash of everything that determines a fold's result; the cache and resume key.

    Besides the data, model, parameters, fold and seeds: the versions of the engine and of the
    libraries the fit uses (an upgrade refits), `device` ("cpu" or "gpu": where a model that
    may use a GPU, such as the network on device auto, is placed) and, for a stacked fit, its fold
    set and its features' digest, class weights other than none, `scored_by`, the metric its released
    file's trial and fold scores are under where it is not `eval_metric` (`metrics.choice_metric`), and
    how the folds deal rows where it is not by class (`split.fold_scheme`).
    """
    payload = {
        "data": fingerprint,
        "model": type(model).__module__ + "." + type(model).__qualname__,
        "params": {**model.params, **params},
        "versions": library_versions(type(model).profile.modules),
        "device": device,
        "fold": fold,
        "num_folds": num_folds,
        "fold_seed": fold_seed,
        "seed": seed,
        "eval_metric": eval_metric,
        "pruning": pruning,
    }
    if fold_set is not None:
        payload["fold_set"] = list(fold_set)
    if stack is not None:
        payload["stack"] = stack.digest
    if class_weight != "none":  # absent otherwise: the keys of runs without class weights stay as they were
        payload["class_weight"] = class_weight
    if scored_by not in (None, eval_metric):
        payload["scored_by"] = scored_by
    if fold_scheme != "by_class" and num_folds > 1:
        payload["fold_scheme"] = fold_scheme
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


_BASE_LIBRARIES = ("numpy", "pandas", "scikit-learn")


@functools.lru_cache(maxsize=None)
def _version(distribution: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def library_versions(modules: tuple[str, ...] = ()) -> dict[str, Optional[str]]:
    """The engine's version and those of the libraries a fit with `modules` depends on (read from the
    installed packages' metadata, without importing them)."""
    import pipeline

    out: dict[str, Optional[str]] = {"pipeline": pipeline.__version__}
    for name in (*_BASE_LIBRARIES, *modules):
        out[name] = _version(name)
    return out


def task_seed(seed: int, model: str, trial: int, fold: int) -> int:
    digest = hashlib.sha256(f"{seed}/{model}/{trial}/{fold}".encode()).digest()
    return int.from_bytes(digest[:4], "little") % (2**31 - 1)


_FOLD_CACHE: dict[tuple, np.ndarray] = {}


def split_rows(data, num_folds: int, fold: Optional[int], fold_seed: int,
               fold_set: Optional[tuple[int, ...]] = None) -> tuple[np.ndarray, np.ndarray]:
    """(rows to learn from, rows held out) of one fold; k <= 1 is the holdout split. With a fold set:
    the rows outside its folds, and those inside; the empty set learns from every row and holds out
    the validation rows (they only draw the learning curve)."""
    if fold_set == ():
        return data.fit_idx(True), data.val_idx
    if num_folds <= 1:
        return data.train_idx, data.val_idx
    folds = _fold_ids(data, num_folds, fold_seed)
    rows = data.fit_idx(True)
    inside = folds == fold if fold_set is None else np.isin(folds, fold_set)
    return rows[~inside], rows[inside]


def row_folds(data, num_folds: int, fold_seed: int) -> np.ndarray:
    """The fold of every row of the data (-1: a test row, in no fold)."""
    out = np.full(len(data.y), -1, dtype=np.int64)
    out[data.fit_idx(True)] = _fold_ids(data, num_folds, fold_seed)
    return out


def _fold_ids(data, num_folds: int, fold_seed: int) -> np.ndarray:
    key = (data.fingerprint, num_folds, fold_seed)
    if key not in _FOLD_CACHE:
        _FOLD_CACHE.clear()
        _FOLD_CACHE[key] = data.fold_ids(num_folds, fold_seed)
    return _FOLD_CACHE[key]


def run_fit(request: FitRequest) -> FoldResult:
    """Fit one fold of one trial of one model (or a stacked model, on its fold set with its level's
    features), and predict its held-out rows and the test rows."""
    start = time.time()
    report = FoldPruner(request.prune_thresholds) if request.pruning else None
    data = resolve_data(request.data)
    train_rows, held_out = split_rows(data, request.num_folds, request.fold, request.fold_seed, request.fold_set)
    local = request.local_gpus
    if local is None:
        local = local_ordinals(request.gpu_ids, sees_only_its_devices=True)
    share = sum(request.gpu_shares, Fraction(0))
    placement = Placement(request.num_cpus, request.gpu_ids, local, share)
    ctx = FitContext(
        problem_type=data.problem_type,
        num_classes=data.num_classes,
        placement=placement,
        seed=request.seed,
        checkpoint_dir=Path(request.checkpoint_dir) if request.checkpoint_dir else None,
        eval_metric=request.eval_metric,
        report=report,
        deadline=request.deadline,
        class_weight=request.class_weight,
        scored_rows=len(data.test_idx),
    )
    model = request.model.clone(request.params)
    X, y = data.X, data.y
    if request.stack is not None:
        X = request.stack.join(X)
    with PeakMemory(gpu=bool(request.gpu_ids)) as peak:
        model.fit_rows(X, y, train_rows, held_out, ctx)
        with model.predicting_on(request.num_cpus):
            t0 = time.perf_counter()
            val_pred = model.take_validation_proba()  # scored while it trained: not predicted again
            if val_pred is None:
                val_pred = model.predict_proba(X.iloc[held_out])
            t1 = time.perf_counter()
            test_pred = model.predict_proba(X.iloc[data.test_idx])
            t2 = time.perf_counter()
    if ctx.checkpoint_dir is not None and ctx.checkpoint_dir.exists():
        import shutil

        shutil.rmtree(ctx.checkpoint_dir, ignore_errors=True)  # the result below supersedes it
    return FoldResult(
        task_id=request.task_id, key=request.key, model=model, held_out=held_out,
        val_pred=val_pred, test_pred=test_pred, fit_seconds=model.fit_seconds_,
        predict_seconds=t2 - t0, test_predict_seconds=t2 - t1, device=model.device_, start=start, end=time.time(),
        pid=os.getpid(), host=socket.gethostname(), gpu_ids=request.gpu_ids,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"), num_cpus=request.num_cpus,
        pruned=bool(report and report.pruned), curve=dict(report.values) if report else {},
        peak_ram=peak.ram, peak_gpu=peak.gpu, nvml_devices=tuple(sorted(peak.gpu_devices)), stopped_by_budget=ctx.stopped_by_budget,
    )


def safe_run_fit(request: FitRequest):
    """run_fit, with any exception turned into a TaskFailure that pickles."""
    from pipeline.errors import Interrupted, PipelineError

    try:
        return run_fit(request)
    except Interrupted:  # a stop signal during an in-process fit stops the run; it is no task failure
        raise
    except Exception as exc:  # a task failure is data for the driver, not a crash of the worker

        message = str(exc) if isinstance(exc, PipelineError) else f"{type(exc).__name__}: {exc}"
        return TaskFailure(request.task_id, message, traceback.format_exc())
