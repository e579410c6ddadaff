"""CatBoost through `catboost.CatBoost`, with native categorical features and early stopping.

An optional extra (`pip install '.[catboost]'`): nothing imports `catboost` until a run selects the
kind (its checks, then its fits). Categorical columns go to CatBoost as `cat_features`, their integer
codes (fixed by the engine's schema from the training rows; a missing or unseen category is -1).
On a GPU (`task_type: GPU`, `devices` from the fit's placement) CatBoost takes no Python callbacks:
a time budget or trial pruning cannot stop such a fit early, and the engine says so when it starts one.

CatBoost hands a Python callback every metric's whole history, rebuilt at every round, so a fit with one
slows as it grows (1,567 rounds on 1,100 rows: 3.6 s against 1.7 s without; 4,000 rounds: 19.1 s against
4.4 s). Where the engine needs one (a deadline, pruning reports), the metrics are recorded every
`METRIC_PERIOD` rounds and the callback applies the params' early stopping (CatBoost's `Iter` detector,
which would record every round): 4,000 rounds then take 5.3 s.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from typing import Optional, Sequence

from pipeline.errors import ConfigError, HardwareError, closest
from pipeline.frames import with_columns
from pipeline.models.base import FitContext, RoundClock, TabularModel, boosting_work, rounds_of
from pipeline.models.profile import MiB, ModelProfile

log = logging.getLogger("pipeline")

LOSSES = {"binary": "Logloss", "multiclass": "MultiClass", "regression": "RMSE"}
ROUNDS = ("iterations", "num_boost_round", "n_estimators", "num_trees")  # CatBoost's names of the most rounds
DEFAULT_ROUNDS = 1000
PATIENCE = ("early_stopping_rounds", "od_wait")  # CatBoost's names of early stopping's patience
RUNTIME_BYTES = 80 * MiB  # CatBoost's own allocations once it trains (thread pool, buffers): the peaks' rest
ENGINE_SET = ("thread_count", "verbose", "allow_writing_files", "devices")  # what the engine sets itself
METRIC_PERIOD = 10  # rounds between recorded metrics under the engine's callback (a fit's best is one of them)


def _on_gpu(params: dict) -> bool:
    return str(params.get("task_type", "CPU")).upper() == "GPU"


def _as_catboost_reads(params: dict) -> dict:
    """task_type in CatBoost's spelling (CPU, GPU), whichever case it was written in: the engine's messages
    say `task_type=cpu` as they say other libraries' devices."""
    if "task_type" not in params:
        return dict(params)
    return {**params, "task_type": str(params["task_type"]).upper()}


def gpu_params(local: Sequence[int]) -> dict:
    """CatBoost's `devices` for a fit on these CUDA ordinals ('0', or '0:1')."""
    return {"devices": ":".join(map(str, local))}


def memory(params: dict, fit, on_gpu: bool):
    """CatBoost bins every feature once (a byte a value up to 255 borders) from the pools' float32 copies of
    the rows, and keeps per-row approximations and derivatives for each of its permutations of the
    training rows, and the categorical columns' counters (CTRs) per permutation. Checked against the
    engine's measured peaks (2-core box, 100 rounds, 20 features of which 4 categorical): 100k rows 321 MiB
    estimated vs 328 measured, 400k rows 453 vs 473; Adult (48,842 x 14, early stopped) 321 vs 313."""
    from pipeline.memory.estimates import CUDA_CONTEXT_BYTES, Estimate, feature_bytes

    p, k, rows = fit.features, fit.classes, fit.train + fit.held_out
    categorical = fit.data.categorical
    borders = int(params.get("border_count", 128 if on_gpu else 254))
    depth = int(params.get("depth", params.get("max_depth", 6)))
    rounds = rounds_of(params, ROUNDS, DEFAULT_ROUNDS)
    permutations = int(params.get("fold_permutation_block", 1)) + 3  # learn permutations, and the one scored
    parts = {
        "fold_copies": rows * feature_bytes(fit),  # the codes and numbers the pools are made from
        "pool": rows * (p * 8 + 8),  # the pools' float32 features and the training's own copy; labels
        "quantized": rows * p * (1 if borders <= 255 else 2),
        "ctr": fit.train * categorical * permutations * 8,
        "approx": fit.train * k * permutations * 16 + fit.held_out * k * 8,
        "trees": rounds * (2**min(depth, 16)) * k * 8,
        "runtime": RUNTIME_BYTES,
    }
    gpu = 0
    if on_gpu:
        gpu = CUDA_CONTEXT_BYTES + fit.train * p + fit.train * k * 24 + parts["ctr"]
        parts["gpu_runtime"] = 512 * MiB
    return Estimate(0, gpu, parts)


PROFILE = ModelProfile(
    library="CatBoost",
    accelerators=frozenset({"cpu", "cuda"}),
    modules=("catboost",),
    distributions=(("catboost",),),
    memory=memory,
    # what `import catboost` adds to a process with numpy, pandas and pyarrow: 37 MiB (RSS, the 2-core box),
    # scipy.sparse's 10 included
    import_bytes=37 * MiB,
    memory_hint="a smaller model.{name}.params.border_count or depth",
    thread_serial_share=0.3,  # not measured apart: the engine's default for a GBM at a few threads
    gpu_fit_cpus=1,  # not measured: the host quantizes the pool before the device boosts
    device_param="",  # task_type takes CPU or GPU (CatBoostModel.on_device)
    gpu_params=gpu_params,
    cost_name="catboost",  # no fit-time calibration yet: device=auto keeps it on the CPU and says so
    shared_objects=(("catboost.core", "CatBoost"),),
    portfolio=(  # after AutoGluon's defaults (the YAML's own params): deeper and slower; shallow and fast;
        # strongly regularised
        {"learning_rate": 0.03, "depth": 8, "l2_leaf_reg": 5.0},
        {"learning_rate": 0.1, "depth": 4, "l2_leaf_reg": 1.0},
        {"learning_rate": 0.05, "depth": 7, "l2_leaf_reg": 10.0},
    ),
    quick=(("iterations", 60),),
)


class CatBoostModel(TabularModel):
    profile = PROFILE

    @classmethod
    def explicit_device(cls, params):
        if "task_type" not in params:
            return None
        value = str(params["task_type"]).upper()
        return ("cuda" if value == "GPU" else "cpu"), f"params.task_type={value}"

    @classmethod
    def on_device(cls, params, device):
        if device != "cuda" or cls.explicit_device(params) is not None:
            return dict(params)
        return {**params, "task_type": "GPU"}

    @classmethod
    def fit_work(cls, params, fit):
        return boosting_work(params, fit, ROUNDS, DEFAULT_ROUNDS, PATIENCE)

    @classmethod
    def gpu_request(cls, params):
        on_gpu = _on_gpu(params)
        return on_gpu, on_gpu, f"params.task_type={str(params.get('task_type', 'CPU')).upper()}"

    @classmethod
    def check_params(cls, name, params, problem_type=None):
        """CatBoost's own check of the training options (its aliases resolved as `fit` resolves them)."""
        try:
            from catboost import CatBoostClassifier, CatBoostError
            from catboost._catboost import _check_train_params
            from catboost.core import _process_synonyms
        except ImportError:
            raise ConfigError(f"model.{name}: the catboost package is not installed "
                              "(pip install 'tabular-pipeline[catboost]', or pip install catboost)") from None
        for key in ENGINE_SET:
            if key in params:
                raise ConfigError(f"model.{name}.params.{key} is set by the engine (threads and devices "
                                  "follow the fit's placement; CatBoost stays silent, writes no files); "
                                  "remove it")
        checked = {"loss_function": LOSSES[problem_type or "binary"], **_as_catboost_reads(params)}
        _process_synonyms(checked)
        try:
            _check_train_params(checked)
        except CatBoostError as exc:
            text = re.sub(r"^[\w/.+-]+:\d+: ", "", str(exc))  # without CatBoost's source file and line
            if text.startswith("Unknown option {"):
                key = text.split("{", 1)[1].split("}", 1)[0]
                import inspect

                known = set(inspect.signature(CatBoostClassifier.__init__).parameters) - {"self"}
                hint = closest(key, known)
                raise ConfigError(f"model.{name}.params.{key} is not a CatBoost parameter{hint}") from None
            raise ConfigError(f"model.{name}.params: CatBoost rejects them: {text}") from None

    @classmethod
    def check_environment(cls, name, params, env=None):
        """With task_type=GPU: the GPUs this CatBoost sees in a child process with the first fit's `env`."""
        if not _on_gpu(params):
            return
        code = "from catboost.utils import get_gpu_device_count as c; print(c())"
        proc = subprocess.run([sys.executable, "-c", code], env={**_environ(), **(env or {})},
                              capture_output=True, text=True, timeout=300)
        count = proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else "0"
        if not count.isdigit() or int(count) == 0:
            detail = (proc.stderr.strip().splitlines() or ["no CUDA device visible"])[-1]
            raise HardwareError(f"model.{name} (CatBoost with task_type=GPU): this CatBoost sees no GPU "
                                f"({detail}); check the driver with nvidia-smi, or set "
                                f"model.{name}.device=cpu")

    # ---- fitting
    def _fit(self, X, y, X_val, y_val, ctx: FitContext) -> None:
        import numpy as np

        rows = np.arange(len(X))
        self._train(X, rows, y, X_val, np.arange(len(X_val)), y_val, ctx)

    def _fit_rows(self, X, y, train_rows, val_rows, ctx: FitContext) -> None:
        self._train(X, train_rows, y[train_rows], X, val_rows, y[val_rows], ctx)

    def _pool(self, X, rows, y=None, weight=None):
        """A catboost.Pool of X's rows at positions `rows` (all: None): categorical columns as their codes."""
        from catboost import Pool

        if rows is not None:
            X = X.iloc[rows]
        self.categorical_ = [c for c in X.columns if X[c].dtype.name == "category"]
        if self.categorical_:
            X = with_columns(X, {c: X[c].cat.codes for c in self.categorical_})
        return Pool(X, label=y, weight=weight, cat_features=self.categorical_ or None)

    def _train(self, X, rows, y, X_val, val_rows, y_val, ctx: FitContext) -> None:
        from catboost import CatBoost

        params = {"loss_function": LOSSES[ctx.problem_type], **_as_catboost_reads(self.params)}
        params.update(thread_count=ctx.placement.num_cpus, verbose=False, allow_writing_files=False)
        params.setdefault("random_seed", ctx.seed)
        params = {k: v for k, v in params.items() if v is not None}
        on_gpu = _on_gpu(params)
        if on_gpu and ctx.placement.local_gpus:
            params.update(self.profile.gpu_params(ctx.placement.local_gpus))
        weight, val_weight = ctx.row_weights(y, y_val)
        train, valid = self._pool(X, rows, y, weight), self._pool(X_val, val_rows, y_val, val_weight)
        callback = None
        if ctx.report is not None or ctx.deadline is not None:
            if on_gpu:
                log.warning("model %s: CatBoost on a GPU takes no callbacks: this fit runs its rounds "
                            "without the time budget's or the pruner's early stop", self.name)
            else:
                params, patience = _patience_taken_over(params)
                callback = _Callback(ctx, patience, _eval_metric(params))
        model = CatBoost(params)
        model.fit(train, eval_set=valid, callbacks=None if callback is None else [callback])
        self.model_ = model
        best = model.get_best_iteration()
        self.best_iteration_ = best if best is not None else model.tree_count_ - 1
        scores = model.get_evals_result().get("validation", {})
        period = int(params.get("metric_period", 1))
        rounds = callback.rounds if callback is not None else None
        self.history_ = {f"valid_{k}": _by_round(list(v), period, rounds) for k, v in scores.items()}
        if on_gpu:
            self.device_ = f"cuda:{params.get('devices', '0')}"

    def _predict(self, X):
        kind = "RawFormulaVal" if self.problem_type_ == "regression" else "Probability"
        threads = getattr(self, "predict_threads_", None) or -1
        return self.model_.predict(self._pool(X, None), prediction_type=kind, thread_count=threads)

    def feature_importance(self) -> Optional[dict[str, float]]:
        gains = self.model_.get_feature_importance()
        return {str(k): float(v) for k, v in zip(self.model_.feature_names_, gains)}

    def refit_params(self, fitted):
        import numpy as np

        rounds = max(1, round(float(np.mean([m.best_iteration_ + 1 for m in fitted]))))
        return {"iterations": rounds, "early_stopping_rounds": None, "od_wait": None, "use_best_model": False}

    def refit_share(self):
        fitted = max((len(v) for v in self.history_.values()), default=0)  # a score each round it fitted
        return (self.best_iteration_ + 1) / fitted if fitted > self.best_iteration_ else 1.0


def _environ() -> dict:
    import os

    return dict(os.environ)


def _patience_taken_over(params: dict) -> tuple[dict, Optional[int]]:
    """The params for a fit with the engine's callback: metrics recorded every METRIC_PERIOD rounds (unless
    the params set metric_period), and the `Iter` detector's patience (early_stopping_rounds or od_wait)
    taken out for the callback to apply; CatBoost's other detector (od_pval) stays CatBoost's."""
    params = dict(params)
    params.setdefault("metric_period", METRIC_PERIOD)
    patience = params.get("early_stopping_rounds", params.get("od_wait"))
    if patience is None or "od_pval" in params or str(params.get("od_type", "Iter")) != "Iter":
        return params, None
    for key in ("early_stopping_rounds", "od_wait", "od_type"):
        params.pop(key, None)
    return params, int(patience)


def _eval_metric(params: dict) -> str:
    """The metric CatBoost's best round is chosen on: eval_metric, else the loss."""
    return str(params.get("eval_metric") or params["loss_function"])


def _recorded(validation: dict, metric: str) -> Optional[list]:
    """`metric`'s values in a callback's validation metrics (named with or without its options)."""
    name = metric.split(":")[0]
    found = [v for k, v in validation.items() if k == metric] or [v for k, v in validation.items()
                                                                   if k.split(":")[0] == name]
    return found[0] if found else next(iter(validation.values()), None)


def _sign(metric: str) -> float:
    """-1 for a metric CatBoost maximises (AUC, Accuracy, Kappa, ...; options after ':' aside), else 1: a
    recorded value times it is a loss, lower better."""
    from catboost.core import is_maximizable_metric

    return -1.0 if is_maximizable_metric(metric.split(":")[0]) else 1.0


def _by_round(values: list, period: int, rounds: Optional[int]) -> list:
    """A metric recorded every `period` rounds (and at the last), placed at its rounds, NaN between."""
    if period <= 1 or rounds is None or not values:
        return values
    steps = list(range(0, rounds, period))
    if len(steps) < len(values):
        steps.append(rounds - 1)
    by_round = [float("nan")] * rounds
    for step, value in zip(steps, values):
        by_round[step] = value
    return by_round


class _Callback:
    """CatBoost's per-round callback (CPU only): the run's deadline, the params' early stopping (`patience`
    rounds without a better recorded `metric`; None: CatBoost's own or none), and the trial's pruning report
    every 10 rounds; returning False stops boosting (use_best_model keeps the best recorded round)."""

    def __init__(self, ctx: FitContext, patience: Optional[int] = None, metric: str = ""):
        self.ctx, self.clock, self.patience, self.metric = ctx, RoundClock(ctx), patience, metric
        self.sign = _sign(metric) if metric else 1.0
        self.rounds, self.recorded, self.best, self.best_round = 0, 0, float("inf"), 0

    def after_iteration(self, info) -> bool:
        self.rounds = info.iteration
        if self.ctx.deadline is not None and self.clock.out_of_time():
            return False
        validation = info.metrics.get("validation", {})
        if self.patience is not None:
            values = _recorded(validation, self.metric)
            if values and len(values) > self.recorded:
                self.recorded = len(values)
                if self.sign * values[-1] < self.best:
                    self.best, self.best_round = self.sign * values[-1], info.iteration - 1
            if info.iteration - 1 - self.best_round >= self.patience:
                return False
        if self.ctx.report is not None and info.iteration % 10 == 0:
            metric, values = next(iter(validation.items()), (None, None))
            if values:
                loss = _sign(metric) * values[-1]
                if self.ctx.report(info.iteration, loss):
                    return False
        return True
