"""LightGBM through `lgb.train`, with native categorical features and early stopping."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Optional, Sequence

from pipeline.errors import ConfigError, HardwareError, closest
from pipeline.models import memory
from pipeline.models.lightgbm_gpu import device_log, log_from_this_thread, probe
from pipeline.models.links import from_raw, to_raw
from pipeline.models.base import FitContext, RoundClock, TabularModel, boosting_work
from pipeline.models.plateau import lightgbm_loss, lightgbm_plateau
from pipeline.models.profile import ModelProfile

GPU_HELP = (
    "The PyPI wheel's OpenCL learner (device_type=gpu) needs an OpenCL runtime, which NVIDIA's driver "
    "ships (check with `clinfo`); device_type=cuda needs a CUDA build: "
    "pip install lightgbm --no-binary lightgbm --config-settings=cmake.define.USE_CUDA=ON"
)
OBJECTIVES = {"binary": "binary", "multiclass": "multiclass", "regression": "regression"}
# num_iterations and its aliases, as LightGBM reads them; the first present sets a fit's most rounds
ROUNDS = ("num_iterations", "num_iteration", "n_iter", "num_tree", "num_trees", "num_round", "num_rounds",
          "nrounds", "num_boost_round", "n_estimators", "max_iter")
DEFAULT_ROUNDS = 100
PATIENCE = ("early_stopping_round", "early_stopping_rounds", "early_stopping", "n_iter_no_change")  # aliases

log = logging.getLogger("pipeline")


def _device(params: dict) -> str:
    for key in ("device_type", "device"):
        if key in params:
            return str(params[key]).lower()
    return "cpu"


def lightgbm_device_id(local: Sequence[int]) -> Optional[int]:
    """The fit's local GPU ordinal: LightGBM's `gpu_device_id` for the CUDA learner; for the OpenCL learner,
    which GPU of its platform to take (`_opencl_device`; NVIDIA's OpenCL honours CUDA_VISIBLE_DEVICES, so a
    worker's one device is the platform's first GPU)."""
    return local[0] if local else None


def gpu_params(local: Sequence[int]) -> dict:
    return {"gpu_device_id": lightgbm_device_id(local)}


PROFILE = ModelProfile(
    library="LightGBM",
    accelerators=frozenset({"cpu", "cuda", "rocm"}),
    modules=("lightgbm",),
    distributions=(("lightgbm",),),
    lean=("lightgbm.compat",),
    memory=memory.lightgbm,
    import_bytes=memory.LIGHTGBM_IMPORT_BYTES,
    # 100 rounds on 60k rows x 20 features took 0.96 s with 1 thread and 0.54 s with 2 (medians of 3, a 2-core
    # box shared with other work): a serial share of 0.11. On the 16-core H100 box, bag5 on Adult ran 1.10x
    # slower with 5 folds at once (3 threads each) than one at a time with 16, which this share reproduces
    # and 0.3 did not.
    thread_serial_share=0.11,
    # predicting a row with 100 rounds' trees, against training a row for 100 rounds (2 threads; 100k to 2M
    # rows; 31 and 128 leaves): 0.54-0.85 at 5 features, 0.26-0.47 at 20, 0.10-0.12 at 100
    predict_cost=(15.0, 13.0),
    # The CUDA learner (device_type=cuda) computes gradients, histograms and splits on the device: 1 thread.
    # The OpenCL learner (device_type=gpu) keeps OPENCL_FIT_CPUS (LightGBMModel.cpus_on_gpu).
    gpu_fit_cpus=1,
    gpu_params=gpu_params,
    costs=Path(__file__).with_name("lightgbm_costs.yaml"),
    cost_name="lightgbm",
    shared_objects=(("lightgbm.basic", "Booster"),),
    # AutoGluon's GBMLarge; its LightGBMXT (extremely randomised trees: each split's threshold drawn at
    # random, which smooths the model on small and noisy tables); a small fast tree; a wide, regularised one;
    # trees of 4 leaves (FLAML's starting point, where its search ends on small binary tables: each tree
    # adds a low-order interaction, close to an additive model)
    portfolio=(
        {"learning_rate": 0.03, "num_leaves": 128, "feature_fraction": 0.9, "min_data_in_leaf": 5,
         "extra_trees": False},
        {"learning_rate": 0.05, "num_leaves": 31, "feature_fraction": 0.9, "min_data_in_leaf": 20,
         "extra_trees": True},
        {"learning_rate": 0.1, "num_leaves": 15, "feature_fraction": 0.7, "min_data_in_leaf": 20,
         "extra_trees": False},
        {"learning_rate": 0.05, "num_leaves": 63, "feature_fraction": 0.6, "min_data_in_leaf": 50,
         "extra_trees": False},
        {"learning_rate": 0.1, "num_leaves": 4, "feature_fraction": 0.9, "min_data_in_leaf": 20,
         "extra_trees": False},
    ),
    quick=(("num_iterations", 60),),
)


class LightGBMModel(TabularModel):
    profile = PROFILE
    # The OpenCL learner (device_type=gpu) builds only the histograms on the device; gradients, split finding
    # and the row partition stay on the CPU's OpenMP threads, so it keeps these.
    OPENCL_FIT_CPUS = 4

    @classmethod
    def cpus_on_gpu(cls, params):
        return cls.OPENCL_FIT_CPUS if _device(params) == "gpu" else cls.profile.gpu_fit_cpus

    @classmethod
    def explicit_device(cls, params):
        for key in ("device_type", "device"):
            if key in params:
                device = str(params[key]).lower()
                return ("cuda" if device in ("gpu", "cuda") else "cpu"), f"params.{key}={device}"
        return None

    @classmethod
    def on_device(cls, params, device):
        """The CUDA learner where this LightGBM has one, else the OpenCL learner (device_type=gpu)."""
        from pipeline.models.lightgbm_build import lightgbm_cuda_available

        if device != "cuda" or cls.explicit_device(params) is not None:
            return dict(params)
        return {**params, "device_type": "cuda" if lightgbm_cuda_available() else "gpu"}

    @classmethod
    def cost_learners(cls, params):
        from pipeline.models.lightgbm_build import lightgbm_cuda_available

        device = _device(params)
        cuda = device == "cuda" or (device != "gpu" and lightgbm_cuda_available())
        return ("lightgbm/cpu", "lightgbm/cuda", "CUDA") if cuda else ("lightgbm/cpu", "lightgbm/opencl", "OpenCL")

    @classmethod
    def fit_work(cls, params, fit):
        return boosting_work(params, fit, ROUNDS, DEFAULT_ROUNDS, PATIENCE)

    @classmethod
    def gpu_request(cls, params):
        device = _device(params)
        on_gpu = device in ("gpu", "cuda")
        return on_gpu, on_gpu, f"params.device_type={device}"

    @classmethod
    def check_params(cls, name, params, problem_type=None):
        import pipeline.models.native as native

        try:
            known = native.lightgbm_parameters()  # from lib_lightgbm, without `import lightgbm`
        except native.LibraryMissing as exc:
            raise ConfigError(f"model.{name}: {exc}") from None
        for key in params:
            if key not in known:
                hint = closest(key, set(known.values())) or closest(key, known)  # a parameter's name first
                raise ConfigError(
                    f"model.{name}.params.{key} is not a LightGBM parameter{hint}; "
                    "LightGBM would only warn and ignore it"
                )

    @classmethod
    def check_environment(cls, name, params, env=None):
        """A one-round GPU fit in a child process with `env`, the environment of the model's first fit."""
        device = _device(params)
        if device not in ("gpu", "cuda"):
            return
        # the device the first fit will use: its worker sees its devices alone, so its ordinal is 0
        checked = {**params, "device_type": device, "gpu_device_id": 0}
        if device == "gpu" and "gpu_platform_id" not in params:
            checked.update(_opencl_device(0))
        error = probe(checked, env or {})
        if error is not None:
            raise HardwareError(
                f"model.{name} (LightGBM with device_type={device}): this LightGBM cannot train on the GPU "
                f"({error}). {GPU_HELP}"
            )

    def _fit(self, X, y, X_val, y_val, ctx: FitContext) -> None:
        import lightgbm as lgb

        names = self._names(X)
        weight, val_weight = ctx.row_weights(y, y_val)
        train = lgb.Dataset(X, y, weight=weight, free_raw_data=True, feature_name=names)
        valid = lgb.Dataset(X_val, y_val, weight=val_weight, reference=train, feature_name=names)
        self._train(train, valid, ctx)

    def _fit_rows(self, X, y, train_rows, val_rows, ctx: FitContext) -> None:
        import lightgbm as lgb

        # the rows' frames belong to the datasets alone, which drop them once binned (as lgb.train would)
        names = self._names(X)
        weight, val_weight = ctx.row_weights(y[train_rows], y[val_rows])
        train = lgb.Dataset(X.iloc[train_rows], y[train_rows], weight=weight, free_raw_data=True,
                            feature_name=names)
        valid = lgb.Dataset(X.iloc[val_rows], y[val_rows], weight=val_weight, reference=train,
                            feature_name=names)
        self._train(train, valid, ctx, validation_rows=lambda: X.iloc[val_rows])

    def _names(self, X):
        """The names LightGBM sees ('auto': the frame's own, where it takes them all); the user's are kept."""
        from pipeline.models.names import LIGHTGBM_REFUSES, needs_renaming, safe_names

        self.feature_names_ = [str(c) for c in X.columns]
        refused = needs_renaming(X.columns, LIGHTGBM_REFUSES)
        return safe_names(X.columns, LIGHTGBM_REFUSES) if refused else "auto"

    def _train(self, train, valid, ctx: FitContext, validation_rows=None) -> None:
        """`validation_rows` (the validation frame, made on demand) asks for the kept model's validation
        scores in `validation_raw_`."""
        import lightgbm as lgb

        params = {"objective": OBJECTIVES[ctx.problem_type], "verbosity": -1, **self.params}
        if ctx.problem_type == "multiclass":
            params.setdefault("num_class", ctx.num_classes)
        params["num_threads"] = ctx.placement.num_cpus
        params.setdefault("seed", ctx.seed)
        on_gpu = _device(params) in ("gpu", "cuda")
        if on_gpu and ctx.placement.local_gpus:
            params.update(self.profile.gpu_params(ctx.placement.local_gpus))
        if _device(params) == "gpu" and "gpu_platform_id" not in params:
            params.update(_opencl_device(max(0, int(params.get("gpu_device_id") or 0))))
        if on_gpu:
            announced = device_log()
            announced.device = announced.vendor = None
            # Info level, so the learner names its device; DeviceLog keeps LightGBM's lines at debug level.
            params["verbosity"] = max(1, int(params.get("verbosity", 1)))
        log_from_this_thread()
        record: dict = {}
        callbacks = [lgb.record_evaluation(record)]
        patience = next((int(params[k] or 0) for k in PATIENCE if k in params), 0)
        if patience > 0:
            callbacks.append(lightgbm_plateau(patience))
        if ctx.report is not None:
            callbacks.append(_pruning_callback(ctx.report))
        if ctx.deadline is not None:
            callbacks.append(_deadline_callback(ctx))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*categorical_feature.*")
            booster = lgb.train(params, train, valid_sets=[valid], valid_names=["valid"], callbacks=callbacks,
                                keep_training_booster=True)
        self.best_iteration_ = booster.best_iteration or booster.current_iteration()
        if validation_rows is not None:
            scores = _kept_validation_scores(booster, self.best_iteration_, params, validation_rows)
            if scores is not None:
                self.validation_raw_ = scores
        # what lgb.train does unless asked to keep the training booster: the kept iterations, no datasets
        self.booster_ = booster.model_from_string(booster.model_to_string()).free_dataset()
        if on_gpu and announced.device:
            kind = "opencl" if _device(params) == "gpu" else "cuda"
            self.device_ = f"{kind}:{lightgbm_device_id(ctx.placement.local_gpus) or 0} ({announced.device})"
            self.device_vendor_ = announced.vendor
            if kind == "opencl":
                _warn_unless_a_gpu(self.name, announced.device, announced.vendor)
        self.history_ = {f"valid_{k}": list(v) for k, v in record.get("valid", {}).items()}

    def _predict(self, X):
        threads = getattr(self, "predict_threads_", None)
        extra = {"num_threads": threads} if threads else {}
        return self.booster_.predict(X, num_iteration=self.best_iteration_, **extra)

    def refit_params(self, fitted):
        import numpy as np

        rounds = max(1, round(float(np.mean([m.best_iteration_ for m in fitted]))))
        return {"num_iterations": rounds, "early_stopping_round": 0}

    def refit_share(self):
        # the booster keeps its rounds up to the best; its validation scores, one a round, count every round
        fitted = max((len(v) for v in self.history_.values()), default=0)
        return self.best_iteration_ / fitted if fitted > self.best_iteration_ > 0 else 1.0

    def feature_importance(self) -> Optional[dict[str, float]]:
        gains = self.booster_.feature_importance(importance_type="gain")
        names = getattr(self, "feature_names_", None) or self.booster_.feature_name()
        return dict(zip(names, map(float, gains)))


def _opencl_device(ordinal: int) -> dict:
    """`gpu_platform_id` and `gpu_device_id` of the fit's GPU (its `ordinal`-th) on the first OpenCL platform
    with a GPU device: LightGBM's defaults may take another runtime's device (PoCL's CPU device), and its
    `gpu_device_id` counts a platform's devices of every type. {} when no platform has a GPU."""
    from pipeline.models.lightgbm_build import opencl_gpu_device

    return opencl_gpu_device(ordinal)


def _warn_unless_a_gpu(model: str, device: str, vendor: Optional[str]) -> None:
    """Say so when the OpenCL learner announced a device that is none of the OpenCL GPU devices."""
    from pipeline.models.lightgbm_build import opencl_gpu_names, unregistered_nvidia_opencl

    gpus = opencl_gpu_names()
    if device not in gpus and not any(name.startswith(f"{device},") for name in gpus):  # cut at a comma
        driver = unregistered_nvidia_opencl()
        hint = "" if driver is None else (
            f"; NVIDIA's OpenCL driver ({driver}) is installed but no ICD file registers it, and LightGBM's "
            f"OpenCL loader reads only those: write {driver} into /etc/OpenCL/vendors/nvidia.icd, or point "
            "OCL_ICD_VENDORS at a folder of .icd files that holds such a file")
        log.warning("model %s: LightGBM's OpenCL learner ran on %s (%s), not a GPU%s", model, device,
                    vendor or "unknown vendor", hint)


# the link (pipeline.models.links) of each objective the engine sets, and of their aliases
LINKS = {
    "binary": "sigmoid",
    "multiclass": "softmax", "softmax": "softmax",
    "regression": "identity", "regression_l2": "identity", "l2": "identity", "mean_squared_error": "identity",
    "mse": "identity",
}
OBJECTIVE_KEYS = ("objective", "objective_type", "app", "application", "loss")
BOOSTING_KEYS = ("boosting", "boosting_type", "boost")


def _kept_validation_scores(booster, best: int, params: dict, validation_rows):
    """The validation rows' predictions of the kept model (its first `best` rounds), in
    `Booster.predict`'s shape, from the scores the booster kept for its metric while it trained (read
    through a custom metric, which the booster hands them). When early stopping left rounds after the
    best one, their raw scores (predicted alone, a fraction of a full pass) are taken off through the
    objective's link. None where that cannot be done exactly (DART or random-forest boosting, whose
    earlier trees change or average; an objective with another link; a saturated score): the caller
    predicts the rows."""
    import numpy as np

    kept = []

    def capture(preds, _data):
        kept.append(np.array(preds, copy=True))
        return "validation_scores", 0.0, False

    booster.eval_valid(feval=capture)
    scores, after = kept[0], booster.current_iteration() - best
    if after == 0:
        return scores
    link = _link(params)
    if link is None:
        return None
    trailing = booster.predict(validation_rows(), start_iteration=best, num_iteration=after, raw_score=True)
    return without_rounds(scores, trailing, link, float(params.get("sigmoid", 1.0)))


def _link(params: dict) -> Optional[str]:
    boosting = next((str(params[k]).lower() for k in BOOSTING_KEYS if k in params), "gbdt")
    objectives = [str(params[k]).lower() for k in OBJECTIVE_KEYS if k in params]
    if boosting not in ("gbdt", "goss") or len(objectives) != 1 or params.get("reg_sqrt"):
        return None
    return LINKS.get(objectives[0])


def without_rounds(scores, trailing, link: str, sigmoid: float = 1.0):
    """Predictions `scores` with the raw scores `trailing` of some rounds taken off, through `link`
    (sigmoid, softmax or identity; LightGBM's sigmoid scales the raw score by `sigmoid`); None when a
    score saturated (a probability of exactly 0 or 1 has lost its raw score)."""
    import numpy as np

    raw = to_raw(scores, link)
    if not np.isfinite(raw).all():
        return None
    out = from_raw(raw - (sigmoid if link == "sigmoid" else 1.0) * trailing, link)
    return out if np.isfinite(out).all() else None


def _deadline_callback(ctx: FitContext):
    """Stop boosting when the next round, and predicting the test rows with the trees so far after it,
    would end past the run's deadline; the rounds so far are the model (LightGBM keeps them all as its
    best iteration)."""
    import lightgbm as lgb

    clock = RoundClock(ctx, PROFILE.predict_cost)

    def callback(env):
        data = env.model.train_set
        if clock.out_of_time(data.num_data(), data.num_feature()):
            raise lgb.callback.EarlyStopException(env.iteration, env.evaluation_result_list)

    callback.order = 50  # after early stopping (30) and pruning (40)
    return callback


def _pruning_callback(report):
    """Report the validation loss every 10 rounds; stop the booster when the trial is pruned."""
    import lightgbm as lgb

    def callback(env):
        if env.iteration % 10 or not env.evaluation_result_list:
            return
        if report(env.iteration, lightgbm_loss(env)):
            raise lgb.callback.EarlyStopException(env.iteration, env.evaluation_result_list)

    callback.order = 40
    return callback
