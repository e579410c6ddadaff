"""XGBoost through `xgb.train`, with native categorical features and early stopping."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Optional, Sequence

from pipeline.errors import ConfigError, HardwareError, closest
from pipeline.models import memory
from pipeline.models.base import FitContext, RoundClock, TabularModel, boosting_work
from pipeline.models.links import from_raw
from pipeline.models.plateau import xgboost_loss, xgboost_plateau
from pipeline.models.profile import ModelProfile

TRAIN_ARGS = ("num_boost_round", "early_stopping_rounds")  # xgb.train's arguments, not booster params
# the engine's own: numeric zeros handed to XGBoost as missing values (LightGBM's parameter of that name)
ENGINE_ARGS = ("zero_as_missing",)
DATA_SHAPED = ("monotone_constraints", "interaction_constraints")  # keyed by feature: need the data
OBJECTIVES = {"binary": "binary:logistic", "multiclass": "multi:softprob", "regression": "reg:squarederror"}
# how each of those objectives turns the summed margin into its prediction (pipeline.models.links)
LINKS = {"binary:logistic": "sigmoid", "multi:softprob": "softmax", "reg:squarederror": "identity"}


def _device(params: dict) -> str:
    return str(params.get("device", "cpu")).lower()


def _on_gpu(device: str) -> bool:
    """Whether XGBoost's `device` value names a GPU (cuda, cuda:N, or the alias gpu)."""
    return device.startswith("cuda") or device == "gpu"


def _booster_params(params: dict, problem_type: str, num_classes: int) -> dict:
    out = {k: v for k, v in params.items() if k not in TRAIN_ARGS + ENGINE_ARGS}
    out.setdefault("objective", OBJECTIVES[problem_type])
    out.setdefault("tree_method", "hist")
    if problem_type == "multiclass":
        out.setdefault("num_class", num_classes)
    return out


def xgboost_device(local: Sequence[int]) -> str:
    """XGBoost's `device` for a fit on one GPU."""
    return f"cuda:{local[0]}" if local else "cpu"


def gpu_params(local: Sequence[int]) -> dict:
    return {"device": xgboost_device(local)}


PROFILE = ModelProfile(
    library="XGBoost",
    accelerators=frozenset({"cpu", "cuda", "rocm"}),
    modules=("xgboost",),
    # the CUDA builds and the CPU-only one install the same package under other names
    distributions=(("xgboost", "xgboost-cu13", "xgboost-cu12", "xgboost-cpu"),),
    lean=("xgboost.compat",),
    memory=memory.xgboost,
    import_bytes=memory.XGBOOST_IMPORT_BYTES,
    # hist, 100 rounds on 60k rows x 20 features: 0.69 s with 1 thread, 0.38 s with 2 (medians of 3, a 2-core
    # box shared with other work): a serial share of 0.09
    thread_serial_share=0.09,
    # predicting a row with 100 rounds' trees, against training a row for 100 rounds (hist, 2 threads; 100k
    # to 2M rows; max_depth 6 and 8): 0.18-0.26 at 5 features, 0.08-0.19 at 20, 0.04-0.08 at 100
    predict_cost=(14.0, 50.0),
    # device=cuda boosts on the device; the host converts the frame to a DMatrix once, which does not go
    # faster with more threads (a 320k x 51 frame: 0.33 s on 1 thread, 0.39 s on 2, on a 2-core box)
    gpu_fit_cpus=1,
    device_param="device",
    gpu_params=gpu_params,
    costs=Path(__file__).with_name("xgboost_costs.yaml"),
    cost_name="xgboost",
    shared_objects=(("xgboost.core", "Booster"),),
    portfolio=(  # XGBoost's own defaults (AutoGluon's XGB); deeper and column-sampled; shallow; trees of
        # depth 2 (4 leaves, where FLAML's search starts)
        {"eta": 0.1, "max_depth": 6, "colsample_bytree": 1.0, "min_child_weight": 1.0},
        {"eta": 0.05, "max_depth": 8, "colsample_bytree": 0.7, "min_child_weight": 1.0},
        {"eta": 0.1, "max_depth": 4, "colsample_bytree": 0.9, "min_child_weight": 3.0},
        {"eta": 0.1, "max_depth": 2, "colsample_bytree": 0.9, "min_child_weight": 3.0},
    ),
    quick=(("num_boost_round", 60),),
)


class XGBoostModel(TabularModel):
    profile = PROFILE

    @classmethod
    def explicit_device(cls, params):
        if "device" not in params:
            return None
        device = _device(params)
        return ("cuda" if _on_gpu(device) else "cpu"), f"params.device={device}"

    @classmethod
    def cost_learners(cls, params):
        return "xgboost/hist", "xgboost/cuda", "CUDA"

    @classmethod
    def fit_work(cls, params, fit):
        return boosting_work(params, fit, ("num_boost_round",), 1000, ("early_stopping_rounds",))

    @classmethod
    def gpu_request(cls, params):
        device = _device(params)
        on_gpu = _on_gpu(device)
        return on_gpu, on_gpu, f"params.device={device}"

    @classmethod
    def check_params(cls, name, params, problem_type="binary"):
        """XGBoost only warns about parameters it does not use. Its own validation, on a booster
        configured without data through the library's C API (no `import xgboost`), makes that an error."""
        import pipeline.models.native as native

        for key in ENGINE_ARGS:
            if not isinstance(params.get(key, False), bool):
                raise ConfigError(f"model.{name}.params.{key}={params[key]!r} must be true or false")
        probe = _booster_params(params, problem_type or "binary", 3)
        probe.update(device="cpu", nthread=1)
        try:
            config, said = native.xgboost_configure(_as_strings(probe))
        except native.XGBoostRejected as exc:
            raise ConfigError(f"model.{name}.params: XGBoost rejects them: {exc}") from None
        except native.LibraryMissing as exc:
            raise ConfigError(f"model.{name}: {exc}") from None
        unused = []
        for text in said:
            if "are not used" in text:
                unused += [p.strip().strip('"') for p in text.split("{", 1)[1].split("}", 1)[0].split(",")]
        if unused:
            known = native.config_keys(config) | set(TRAIN_ARGS + ENGINE_ARGS) | {"eval_metric"} | set(DATA_SHAPED)
            key = unused[0]
            raise ConfigError(
                f"model.{name}.params.{key} is not an XGBoost parameter{closest(key, known)}; "
                "XGBoost would only warn and ignore it"
            )

    @classmethod
    def check_environment(cls, name, params, env=None):
        """Nothing to probe before the fit: XGBoost's wheels carry CUDA. After a GPU fit the
        booster's own config is checked, since XGBoost silently falls back to the CPU."""

    def _fit(self, X, y, X_val, y_val, ctx: FitContext) -> None:
        weight, val_weight = ctx.row_weights(y, y_val)
        self._train(self._training_matrix(self._frame(X), y, ctx, weight),
                    _matrix(self._frame(X_val), y_val, ctx.placement.num_cpus, val_weight), ctx)

    def _fit_rows(self, X, y, train_rows, val_rows, ctx: FitContext) -> None:
        # each matrix copies its rows: their frames go once it is made
        weight, val_weight = ctx.row_weights(y[train_rows], y[val_rows])
        self._train(self._training_matrix(self._frame(X, train_rows), y[train_rows], ctx, weight),
                    _matrix(self._frame(X, val_rows), y[val_rows], ctx.placement.num_cpus, val_weight), ctx)

    def _frame(self, X, rows=None):
        """X (or its rows) as XGBoost reads it: with zero_as_missing, numeric zeros as missing values."""
        from pipeline.models.names import XGBOOST_REFUSES, needs_renaming, safe_names

        if self.params.get("zero_as_missing", False):
            X = zeros_as_missing(X, rows)
        else:
            X = X if rows is None else X.iloc[rows]
        if needs_renaming(X.columns, XGBOOST_REFUSES):  # XGBoost sees safe names; the user's stay outside
            self.feature_names_ = [str(c) for c in X.columns]
            X = X.set_axis(safe_names(X.columns, XGBOOST_REFUSES), axis=1)
        return X

    def _training_matrix(self, X, y, ctx: FitContext, weight=None):
        """For the CPU's hist method a QuantileDMatrix: XGBoost bins the rows straight from the frame,
        without the DMatrix's copy of them as floats (the same bins, so the same model). The
        validation rows stay a DMatrix: they are scored on their values, as predict scores them.

        On a GPU a DMatrix: XGBoost copies its rows to the device and finds the bins there, where a
        QuantileDMatrix would sketch them on the host first (a 320k x 51 frame on a 2-core box: 1.27 s
        to sketch with 2 threads, 0.15 s to copy into a DMatrix, which gains nothing from more threads,
        so the GPU fit's one thread costs it nothing)."""
        import xgboost as xgb

        params = _booster_params(self.params, ctx.problem_type, ctx.num_classes)
        if params["tree_method"] != "hist" or self.gpu_request(params)[0]:
            return _matrix(X, y, ctx.placement.num_cpus, weight)
        return xgb.QuantileDMatrix(X, label=y, weight=weight, enable_categorical=True,
                                   nthread=ctx.placement.num_cpus)

    def _train(self, train, valid, ctx: FitContext) -> None:
        import xgboost as xgb

        params = _booster_params(self.params, ctx.problem_type, ctx.num_classes)
        params["nthread"] = ctx.placement.num_cpus
        params.setdefault("seed", ctx.seed)
        on_gpu = self.gpu_request(params)[0]
        if on_gpu:
            if ctx.placement.local_gpus:
                params.update(self.profile.gpu_params(ctx.placement.local_gpus))
        record: dict = {}
        callbacks = []
        if on_gpu:
            callbacks.append(_GpuGuard(self.name, params["device"]))
        patience = int(self.params.get("early_stopping_rounds") or 0)
        if patience > 0:
            callbacks.append(xgboost_plateau(patience))
        if ctx.report is not None:
            callbacks.append(_PruningCallback(ctx.report))
        if ctx.deadline is not None:
            callbacks.append(_DeadlineCallback(ctx, (train.num_row(), train.num_col())))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*No visible GPU is found.*")
            warnings.filterwarnings("ignore", message=".*Device is changed from GPU to CPU.*")
            self.booster_ = xgb.train(
                params, train,
                num_boost_round=int(self.params.get("num_boost_round", 1000)),
                evals=[(valid, "valid")],
                early_stopping_rounds=self.params.get("early_stopping_rounds"),
                evals_result=record, verbose_eval=False, callbacks=callbacks or None,
            )
        self.best_iteration_ = getattr(self.booster_, "best_iteration", self.booster_.num_boosted_rounds() - 1)
        self.history_ = {f"valid_{k}": list(v) for k, v in record.get("valid", {}).items()}
        self.validation_raw_ = self._kept_validation_scores(valid, params)

    def _kept_validation_scores(self, valid, params: dict):
        """The kept model's predictions of the validation matrix, which the booster scored every round:
        its scores after the last round are cached, so with no round after the best one they cost
        nothing. Rounds after the best one are taken off those scores (their sum predicted alone, a
        fraction of a full pass) through the objective's link; for another objective or booster the
        rounds kept are summed again."""
        import numpy as np

        rounds = self.booster_.num_boosted_rounds()
        link = LINKS.get(str(params["objective"]))
        if self.best_iteration_ + 1 >= rounds or link is None or params.get("booster", "gbtree") != "gbtree":
            return self._predict_matrix(valid)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*mismatched devices.*")
            margin = self.booster_.predict(valid, output_margin=True)  # the cache
            # with a base margin of zero the later rounds' trees alone, without the model's base score
            valid.set_base_margin(np.zeros(margin.size, dtype=np.float32))
            margin -= self.booster_.predict(valid, output_margin=True,
                                            iteration_range=(self.best_iteration_ + 1, rounds))
        return from_raw(margin, link)

    def _predict(self, X):
        import xgboost as xgb

        return self._predict_matrix(xgb.DMatrix(self._frame(X), enable_categorical=True,
                                                nthread=getattr(self, "predict_threads_", None)))

    def _predict_matrix(self, matrix):
        with warnings.catch_warnings():  # a GPU booster predicting host data copies it, and says so
            warnings.filterwarnings("ignore", message=".*mismatched devices.*")
            return self.booster_.predict(matrix, iteration_range=(0, self.best_iteration_ + 1))

    def feature_importance(self) -> Optional[dict[str, float]]:
        scores = self.booster_.get_score(importance_type="total_gain")
        names = getattr(self, "feature_names_", None)
        if names:  # the booster knows the safe names, in the same order as the user's
            from pipeline.models.names import XGBOOST_REFUSES, safe_names

            scores = {user: scores[safe] for user, safe in zip(names, safe_names(names, XGBOOST_REFUSES))
                      if safe in scores}
        return {k: float(v) for k, v in scores.items()}

    def place(self, device: str, num_cpus: int) -> None:
        super().place(device, num_cpus)
        self.booster_.set_param({"device": device, "nthread": num_cpus})

    def refit_params(self, fitted):
        import numpy as np

        rounds = max(1, round(float(np.mean([m.best_iteration_ + 1 for m in fitted]))))
        return {"num_boost_round": rounds, "early_stopping_rounds": None}

    def refit_share(self):
        kept = self.best_iteration_ + 1
        return kept / max(1, self.booster_.num_boosted_rounds(), kept)


def zeros_as_missing(X, rows=None):
    """X (or its rows at positions `rows`) with the zeros of its numeric columns as NaN: XGBoost sends a
    missing value down whichever side of a split its gain prefers, so a mostly-zero feature (capital-gain
    on Adult) splits its nonzero values on their own, with the zeros on either side, as XGBoost treats the
    entries a sparse matrix leaves out (AutoGluon's XGBoost reads its rows as one). Missing values already
    there stay missing; categorical and boolean columns are kept as they are.

    The numeric columns are taken once, a column at a time, into one float32 block (XGBoost's own type for
    every value, so its splits are the same): the fold's rows cost one copy, and XGBoost reads one block
    as it reads a frame's `iloc` rows (a frame of a block per column made its QuantileDMatrix peak 72 MiB
    higher at 1.3M rows x 20). A whole frame without a zero is returned as it is."""
    import numpy as np
    import pandas as pd

    numeric = [name for name in X.columns if X[name].dtype.kind in "iuf"]
    if rows is None and not any((_numbers(X[name]) == 0).any() for name in numeric):
        return X
    values = np.empty((len(X) if rows is None else len(rows), len(numeric)), dtype=np.float32, order="F")
    for j, name in enumerate(numeric):
        column = _numbers(X[name])
        values[:, j] = column if rows is None else column[rows]
        taken = values[:, j]  # contiguous (Fortran order): a view to change in place
        taken[taken == 0] = np.nan
    out = pd.DataFrame(values, columns=numeric, index=X.index if rows is None else X.index[rows], copy=False)
    for position, name in enumerate(X.columns):
        if name not in out.columns:
            array = X[name].array
            out.insert(position, name, array if rows is None else array.take(rows))
    return out


def _numbers(column):
    """A numeric column's values as numpy reads them (a nullable column's NA as NaN, in float32)."""
    import numpy as np

    if isinstance(column.dtype, np.dtype):
        return column.to_numpy()
    return column.to_numpy(dtype=np.float32, na_value=np.nan)


def _matrix(X, y, threads: int, weight=None):
    import xgboost as xgb

    return xgb.DMatrix(X, label=y, weight=weight, enable_categorical=True, nthread=threads)


def _visible() -> str:
    import os

    return os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")


def _as_strings(params: dict) -> list[tuple[str, str]]:
    """(name, value) pairs as xgboost's Booster passes them to the library: one pair per metric of an
    `eval_metric` list, None left out; constraints keyed by feature name depend on the data and stay out."""
    pairs = []
    for key, value in params.items():
        if value is None or key in DATA_SHAPED:
            continue
        for one in value if key == "eval_metric" and isinstance(value, (list, tuple)) else [value]:
            pairs.append((key, str(one)))
    return pairs


def _GpuGuard(name: str, device: str):
    """After the first round: XGBoost with device=cuda and no visible GPU silently trains on the CPU."""
    import xgboost as xgb

    class Guard(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            if epoch == 0:
                ran_on = json.loads(model.save_config())["learner"]["generic_param"]["device"]
                if not ran_on.startswith("cuda"):
                    raise HardwareError(
                        f"model {name}: XGBoost was asked for device={device} but trained on the CPU "
                        f"(device={ran_on}): no GPU was visible to it (CUDA_VISIBLE_DEVICES={_visible()}). "
                        "Check the driver with nvidia-smi, or install the xgboost wheel with CUDA (not xgboost-cpu)"
                    )
            return False

    return Guard()


class _DeadlineCallback:
    """Stop boosting when the next round, and predicting the test rows with the trees so far after it,
    would end past the run's deadline; the booster keeps the rounds so far (early stopping's best of
    them, when it runs). `shape`: the training matrix's (rows, columns)."""

    def __new__(cls, ctx: FitContext, shape: tuple[int, int]):
        import xgboost as xgb

        clock = RoundClock(ctx, PROFILE.predict_cost)

        class Callback(xgb.callback.TrainingCallback):
            def before_training(self, model):
                clock.start()
                return model

            def after_iteration(self, model, epoch, evals_log):
                return clock.out_of_time(*shape)

        return Callback()


class _PruningCallback:
    """Report the validation loss every 10 rounds (the metric early stopping reads, as the plateau does);
    stop when the trial is pruned."""

    def __new__(cls, report):
        import xgboost as xgb

        class Callback(xgb.callback.TrainingCallback):
            def after_iteration(self, model, epoch, evals_log):
                if epoch % 10:
                    return False
                return bool(report(epoch, xgboost_loss(evals_log)))

        return Callback()
