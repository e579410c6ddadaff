"""The model base class: a public `fit()` template around `_fit`/`_predict` hooks.

Like scikit-learn estimators, `__init__` only stores parameters, fitted state ends in `_`, and
`fit` returns `self`. Library imports (numpy and pandas too) happen inside the methods that fit and
predict, so importing a model, reading its class attributes and calling its checks stay cheap.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional

from pipeline.models.profile import ModelProfile
from pipeline.resources import ModelNeeds

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


# An early-stopped boosting fit is planned (its device's fit-time estimate) at no more than this many rounds:
# its cap (10,000) is a bound early stopping seldom reaches, and a GPU's fixed start-up cost weighed against
# 10,000 rounds would send to the GPU fits that stop after a few hundred (Adult's XGBoost)
EARLY_STOPPED_ROUNDS = 1000


def boosting_work(params: dict, fit, round_keys: tuple[str, ...], default_rounds: int,
                  patience_keys: tuple[str, ...]) -> float:
    """A boosted-tree fit's work in its calibration's unit: training rows x features x rounds, in billions.
    The rounds are the first of `round_keys` the params set (else `default_rounds`); where they set a
    patience under any of `patience_keys` (0 or None: none), at most `EARLY_STOPPED_ROUNDS`."""
    rounds = rounds_of(params, round_keys, default_rounds)
    if any(params.get(key) for key in patience_keys):
        rounds = min(rounds, EARLY_STOPPED_ROUNDS)
    return fit.train * fit.features * rounds / 1e9



def rounds_of(params: dict, round_keys: tuple[str, ...], default_rounds: int) -> int:
    """The most rounds `params` set under the first of the library's names `round_keys` it holds."""
    return int(next((params[k] for k in round_keys if k in params), default_rounds))

@dataclass(frozen=True)
class Placement:
    """Where a fit runs: its CPU count and GPUs (physical ids, and ordinals this process sees)."""

    num_cpus: int = 1
    gpu_ids: tuple[int, ...] = ()
    local_gpus: tuple[int, ...] = ()
    gpu_share: Fraction = Fraction(0)

    @property
    def device(self) -> str:
        from pipeline.accelerators import torch_device

        return torch_device(self.local_gpus)

    @property
    def num_gpus(self) -> int:
        return len(self.local_gpus)


@dataclass
class FitContext:
    """What a fit needs besides data: problem, placement, seed, a checkpoint folder, callbacks."""

    problem_type: str
    num_classes: int
    placement: Placement = field(default_factory=Placement)
    seed: int = 0
    checkpoint_dir: Optional[Path] = None
    eval_metric: str = "auto"
    report: Optional[Callable[[int, float], bool]] = None  # (step, value) -> prune?
    deadline: Optional[float] = None  # time.time() the fit must end by (the run's time_limit_s); None: none
    stopped_by_budget: bool = False  # set when the fit stopped early for the deadline
    class_weight: str = "none"  # data.class_weight: none | balanced (pipeline.class_weights)
    scored_rows: int = 0  # rows predicted once the fit stops (the test rows): the deadline keeps time for them

    def out_of_time(self, step_seconds: float = 0.0, after_seconds: float = 0.0) -> bool:
        """Whether one more step (a boosting round, an epoch) of `step_seconds`, and the `after_seconds`
        the fit takes once it stops, would end past the deadline; once true it stays true, and marks the
        fit as stopped by the budget."""
        if self.deadline is not None and not self.stopped_by_budget:
            self.stopped_by_budget = time.time() + step_seconds + after_seconds >= self.deadline
        return self.stopped_by_budget

    def scoring_seconds(self, trained_seconds: float, train_rows: int, features: int,
                        cost: tuple[float, float]) -> float:
        """The time predicting `scored_rows` takes with the trees of `trained_seconds` of boosting on
        `train_rows` rows of `features` columns, for a profile's `predict_cost` (a, b)."""
        a, b = cost
        return trained_seconds * self.scored_rows / max(train_rows, 1) * a / (features + b)

    def row_weights(self, y_train: np.ndarray, y_val: Optional[np.ndarray] = None):
        """(training rows' weights, validation rows' weights) of `class_weight` for a fit on these labels;
        (None, None) without class weights or for a regression label."""
        from pipeline.class_weights import row_weights

        if self.problem_type == "regression":
            return None, None
        return row_weights(self.class_weight, y_train, y_val, self.num_classes)


class RoundClock:
    """A fit's rounds (boosting rounds, a forest's growth steps) against its deadline: after each, whether
    the next one, and predicting the scored rows with what was trained so far (for a profile's
    `predict_cost`; none: nothing kept for it), would end past the deadline (`FitContext.out_of_time`).
    Training's time runs from `start()`, else from the first round's end (LightGBM bins its data inside
    its first round: that time says nothing of a round's or a prediction's)."""

    def __init__(self, ctx: FitContext, predict_cost: Optional[tuple[float, float]] = None):
        self.ctx, self.predict_cost = ctx, predict_cost
        self.last, self.trained_from = time.time(), None

    def start(self) -> None:
        self.last = self.trained_from = time.time()

    def out_of_time(self, rows: int = 0, features: int = 0) -> bool:
        """A round ended (on `rows` rows of `features` columns): stop now?"""
        now = time.time()
        step, self.last = now - self.last, now
        self.trained_from = now if self.trained_from is None else self.trained_from
        after = 0.0 if self.predict_cost is None else self.ctx.scoring_seconds(
            now - self.trained_from, rows, features, self.predict_cost)
        return self.ctx.out_of_time(step, after)


class TabularModel(ABC):
    """Base of every model. Subclasses declare their kind's `profile` and implement `_fit` and `_predict`,
    never `fit`."""

    profile: ClassVar[ModelProfile] = ModelProfile("")

    @classmethod
    def cpus_on_gpu(cls, params: dict) -> int:
        """The profile's `gpu_fit_cpus` for these params (a kind whose GPU learners differ overrides it)."""
        return cls.profile.gpu_fit_cpus

    def __init__(self, params: Optional[dict] = None, name: Optional[str] = None):
        self.params = dict(params or {})
        self.name = name or type(self).__name__

    # ---- description, before any fit
    @classmethod
    @abstractmethod
    def gpu_request(cls, params: dict) -> tuple[bool, bool, str]:
        """(may use a GPU, cannot run without one, the parameter that says so) for these params."""

    @classmethod
    def needs(cls, name: str, params: dict) -> ModelNeeds:
        wants, requires, param = cls.gpu_request(params)
        profile = cls.profile
        packs, why = (True, "")
        if profile.cost_name:
            packs, why = profile.calibration().packing_pays(profile.cost_name)
        return ModelNeeds(name, wants, requires, profile.max_gpus_per_fit, param, profile.library,
                          profile.thread_serial_share, gpu_fit_cpus=cls.cpus_on_gpu(params),
                          gpu_packing=packs, packing_reason=why)

    # ---- the device (pipeline.planning.device_choice)
    @classmethod
    def explicit_device(cls, params: dict) -> Optional[tuple[str, str]]:
        """('cpu' or 'cuda', 'params.<key>=<value>') when the params name the library's device themselves."""
        return None

    @classmethod
    def on_device(cls, params: dict, device: str) -> dict:
        """The params with the library's device parameters for `device` ('cpu' or 'cuda'); a device the
        params name themselves stays."""
        if not cls.profile.device_param or cls.explicit_device(params) is not None:
            return dict(params)
        return {**params, cls.profile.device_param: device}

    @classmethod
    def cost_learners(cls, params: dict) -> tuple[str, str, str]:
        """The calibration's CPU and GPU learners for these params, and the GPU learner's name for messages."""
        return f"{cls.profile.cost_name}/cpu", f"{cls.profile.cost_name}/cuda", "CUDA"

    @classmethod
    def fit_work(cls, params: dict, fit) -> float:
        """One fit's work in the calibration's unit, for a pipeline.memory.estimates.FitShape."""
        return 0.0

    @classmethod
    def memory_estimate(cls, params: dict, fit, on_gpu: bool):
        """What one fit's own structures take (pipeline.memory.estimates.Estimate) for a
        pipeline.memory.estimates.FitShape: the profile's `memory`; the process and the table are
        added by the planner."""
        return cls.profile.memory(params, fit, on_gpu)

    @classmethod
    def check_params(cls, name: str, params: dict, problem_type: Optional[str] = None) -> None:
        """Raise ConfigError for a parameter the library does not know, naming the closest one."""

    @classmethod
    def check_environment(cls, name: str, params: dict, env: Optional[dict] = None) -> None:
        """Raise HardwareError when this library build cannot do what the params ask (GPU support);
        `env` is the environment (CUDA_VISIBLE_DEVICES) of the model's first planned fit."""

    def clone(self, params: Optional[dict] = None) -> "TabularModel":
        """A fresh, unfitted copy, with `params` laid over this model's own."""
        return type(self)({**self.params, **(params or {})}, self.name)

    # ---- saving: the fitted object the profile names `packed` is pickled compressed, compressed once
    def __getstate__(self):
        if not self.profile.packed:
            return dict(self.__dict__)
        from pipeline.models.packing import packed_state

        return packed_state(self, self.__dict__, self.profile.packed)

    def __setstate__(self, state):
        from pipeline.models.packing import unpacked_state

        self.__dict__.update(unpacked_state(state, self.profile.packed) if self.profile.packed else state)

    # ---- the template
    def fit(self, X: pd.DataFrame, y: np.ndarray, X_val: pd.DataFrame, y_val: np.ndarray, ctx: FitContext):
        self._timed(ctx, lambda: self._fit(X, y, X_val, y_val, ctx))
        self.__dict__.pop("validation_raw_", None)  # the validation scores are handed over by fit_rows only
        return self

    def fit_rows(self, X: pd.DataFrame, y: np.ndarray, train_rows: np.ndarray, val_rows: np.ndarray,
                 ctx: FitContext):
        """fit() on rows of one table picked by position, as the engine fits a fold. The rows' frames
        are built where the library reads them (`_fit_rows`), so they can go as soon as it has made its
        own matrices; by default `_fit` gets them. The validation rows' scores the fit kept wait for
        `take_validation_proba`."""
        return self._timed(ctx, lambda: self._fit_rows(X, y, train_rows, val_rows, ctx))

    def _timed(self, ctx: FitContext, fit: Callable[[], None]):
        self.problem_type_ = ctx.problem_type
        self.num_classes_ = ctx.num_classes
        self.device_ = ctx.placement.device
        self.history_: dict[str, list[float]] = {}
        start = time.perf_counter()
        fit()
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        """(n, classes) probabilities for classification; (n,) values for regression."""
        self._check_fitted()
        return self._as_proba(self._predict(X))

    def take_validation_proba(self) -> Optional[np.ndarray]:
        """predict_proba of the validation rows as the fit scored them while it trained (at the model
        it kept), once: None when it kept none, and the caller predicts them. A model keeps them as
        `_predict` would return them in `self.validation_raw_`."""
        raw = self.__dict__.pop("validation_raw_", None)
        return None if raw is None else self._as_proba(raw)

    def _as_proba(self, raw) -> np.ndarray:
        import numpy as np

        out = np.asarray(raw)
        if self.problem_type_ == "binary" and out.ndim == 1:
            out = np.column_stack([1.0 - out, out])
        return out

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        import numpy as np

        out = self.predict_proba(X)
        return out if self.problem_type_ == "regression" else np.argmax(out, axis=1)

    def feature_importance(self) -> Optional[dict[str, float]]:
        return None

    def place(self, device: str, num_cpus: int) -> None:
        """Predict on `device` ('cpu', 'cuda:0') with `num_cpus` threads from now on."""
        self.predict_threads_ = num_cpus

    @contextlib.contextmanager
    def predicting_on(self, num_cpus: int):
        """Inside the block, predict with `num_cpus` threads: a fit's own CPUs while it scores its rows
        (unset, scikit-learn's kinds predicted on one thread and the boosters on every core of the box).
        After it, as before: the model saved and logged keeps no thread count of the box it was fitted on."""
        before = self.__dict__.get("predict_threads_")
        self.predict_threads_ = num_cpus
        try:
            yield self
        finally:
            if before is None:
                self.__dict__.pop("predict_threads_", None)
            else:
                self.predict_threads_ = before

    def refit_params(self, fitted: list["TabularModel"]) -> dict:
        """Parameters that fit this model once more on all the data for the mean length (rounds,
        epochs) the `fitted` fold models early-stopped at, with early stopping off."""
        return {}

    def refit_share(self) -> float:
        """The share of this fold fit's work a refit of it does (rows apart): the rounds, epochs or trees
        `refit_params` keeps (the length it early-stopped at) over those it fitted, its patience past the
        best included; 1 where a kind does not say (its refit costs a fold fit, as the tail prices it)."""
        return 1.0

    def _check_fitted(self) -> None:
        if not hasattr(self, "fit_seconds_"):
            raise RuntimeError(f"{self.name} is not fitted; call fit() first")

    @abstractmethod
    def _fit(self, X, y, X_val, y_val, ctx: FitContext) -> None: ...

    def _fit_rows(self, X, y, train_rows, val_rows, ctx: FitContext) -> None:
        self._fit(X.iloc[train_rows], y[train_rows], X.iloc[val_rows], y[val_rows], ctx)

    @abstractmethod
    def _predict(self, X: pd.DataFrame) -> Any: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, params={self.params!r})"
