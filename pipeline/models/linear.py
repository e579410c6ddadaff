"""A regularised linear model through scikit-learn: logistic regression (binary, multinomial) or ridge
regression, on the CPU.

Trees approximate a linear trend with steps; a linear model adds to an ensemble of them what they lack
(FLAML searches an L1 logistic regression by default, AutoGluon fits a linear model in its presets). Its
one hyperparameter that matters, the penalty, is chosen by each fit itself, as glmnet does: the fit walks
a path of `path_length` inverse penalties C from `c_min` to `c_max` (log-spaced, the weights of each step
warm-starting the next), scores each on the validation rows (log loss, or squared error), and stops after
`patience` steps that did not lower it by a share `tol`, keeping the best step; a refit on every row
fits once, at the geometric mean of the C its fold models kept. Ridge's penalty is alpha = 1 / C.
Numbers are imputed with their training median (a missing-value indicator beside each column that has
missing values) and standardised (`numeric: standard`) or mapped through their quantiles onto a normal
(`numeric: quantile`, for skewed columns); categories are one-hot encoded, a category seen in fewer than
`min_frequency` training rows sharing one column with the other rare ones, and an unseen or missing one
encoded as none of them.

The solvers' matrix products run on one BLAS thread, whatever the fit's placement: they are tall and thin
(rows x encoded columns x classes) and bound by memory, and the BLAS's own threads only add their waking.
On the 2-core box, a multinomial path of 14 steps on 3,300 rows took 4.4 s on the two threads OpenBLAS
starts with and 0.47 s on one (10 classes); a logistic regression on 300,000 rows x 20 columns 2.36 s
against 1.33 s, a ridge on 300,000 x 60 0.54 s against 0.12 s. A process with 16 CPUs and 5 folds at once
would otherwise run 5 x 16 BLAS threads.
"""

from __future__ import annotations

import logging
from typing import Optional

from pipeline.errors import ConfigError
from pipeline.label_range import check_extend, label_range, within
from pipeline.models.base import FitContext, RoundClock, TabularModel
from pipeline.models.fold_loss import every_class, validation_loss
from pipeline.models.own_params import checked
from pipeline.models.profile import MiB, ModelProfile
from pipeline.said_once import say_once

log = logging.getLogger(__name__)

OWN = {"path_length": 25, "c_min": 1e-4, "c_max": 1e4, "patience": 3, "tol": 0.001, "numeric": "standard",
       "min_frequency": 1, "max_iter": 500, "y_range_extend": 0.05}
NUMERIC = ("standard", "quantile", "spline")
SPLINE_KNOTS, SPLINE_DEGREE = 5, 3  # numeric: spline, each number a cubic B-spline basis of 7 columns


def memory(params: dict, fit, on_gpu: bool):
    """The numbers as float64 three times over (imputed, scaled, the solver's copy), the one-hot columns
    as a sparse matrix (a value and an index a category column and row), the solver's gradients."""
    from pipeline.memory.estimates import Estimate, feature_bytes

    rows = fit.train + fit.held_out
    spread = SPLINE_KNOTS + SPLINE_DEGREE - 1 if params.get("numeric") == "spline" else 1  # columns a number
    parts = {
        "fold_copies": rows * feature_bytes(fit),
        "matrix": 3 * rows * fit.features * 8 * spread,
        "one_hot": rows * fit.features * 12,
        "runtime": 20 * MiB,
    }
    return Estimate(0, 0, parts)


PROFILE = ModelProfile(
    library="scikit-learn",
    accelerators=frozenset({"cpu"}),
    modules=("sklearn.linear_model", "sklearn.preprocessing", "sklearn.compose"),
    distributions=(("scikit-learn",),),
    memory=memory,
    import_bytes=40 * MiB,  # sklearn.linear_model with scipy beside numpy and pandas
    memory_hint="a larger model.{name}.params.min_frequency (fewer one-hot columns), or fewer rows",
    thread_serial_share=1.0,  # L-BFGS and a ridge solve on one BLAS thread: one thread's work
    portfolio=({"numeric": "quantile"}, {"min_frequency": 10}),  # skewed numbers; rare categories pooled
    quick=(("path_length", 8),),
)


def one_blas_thread():
    """A context in which the BLAS libraries loaded run on one thread (the module's docstring says why)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _path(params: dict):
    import numpy as np

    return np.logspace(np.log10(params["c_min"]), np.log10(params["c_max"]), int(params["path_length"]))


class LinearModel(TabularModel):
    profile = PROFILE

    @classmethod
    def gpu_request(cls, params):
        return False, False, ""

    @classmethod
    def check_params(cls, name, params, problem_type=None):
        own = checked(name, params, OWN, "the linear model",
                      whole=("path_length", "patience", "max_iter", "min_frequency"),
                      choices=(("numeric", NUMERIC),))
        for key in ("c_min", "c_max"):
            if not isinstance(own[key], (int, float)) or own[key] <= 0:
                raise ConfigError(f"model.{name}.params.{key}={own[key]!r} must be a number > 0 (an inverse "
                                  "penalty: C of scikit-learn's LogisticRegression, 1 / alpha of its Ridge)")
        if own["c_min"] > own["c_max"]:
            raise ConfigError(f"model.{name}.params.c_min={own['c_min']!r} is above c_max={own['c_max']!r}: "
                              "the path runs from c_min up to c_max")
        if not isinstance(own["tol"], (int, float)) or own["tol"] < 0:
            raise ConfigError(f"model.{name}.params.tol={own['tol']!r} must be a number >= 0 "
                              "(a share of the loss)")
        check_extend(own["y_range_extend"], f"model.{name}.params.y_range_extend")

    # ---- fitting
    def _fit(self, X, y, X_val, y_val, ctx: FitContext) -> None:
        with one_blas_thread():
            self._fit_path(X, y, X_val, y_val, ctx)

    def _fit_path(self, X, y, X_val, y_val, ctx: FitContext) -> None:
        import copy

        import numpy as np

        params = {**OWN, **self.params}
        self.y_range_ = label_range(y, params["y_range_extend"]) if ctx.problem_type == "regression" else None
        self.encoder_ = self._encoder(X, params)
        train = self.encoder_.fit_transform(X)
        held = self.encoder_.transform(X_val) if len(X_val) else None
        weight, _ = ctx.row_weights(y, y_val)
        path = _path(params)
        if held is None:  # a refit on every row: the path's last step, which refit_params names
            self.model_ = self._estimator(ctx, params)
            self._set_c(self.model_, path[-1], ctx)
            self._fit_estimator(self.model_, train, y, weight, path[-1], params)
            self.step_, self.history_ = len(path), {}
            return
        clock, losses, best, waited, kept = RoundClock(ctx), [], (np.inf, 0), 0, None
        estimator = self._estimator(ctx, params)
        for step, c in enumerate(path, start=1):
            if step > 1 and clock.out_of_time():  # the first step always fits
                break
            self._set_c(estimator, c, ctx)
            self._fit_estimator(estimator, train, y, weight, c, params)
            pred = self._output(estimator, held)
            loss = validation_loss(y_val, pred, ctx.problem_type)
            losses.append(loss)
            if loss < best[0] - abs(best[0]) * params["tol"] if np.isfinite(best[0]) else np.isfinite(loss):
                best, waited = (loss, step), 0
                kept = copy.deepcopy(estimator)
                self.validation_raw_ = pred
            else:
                waited += 1
            if ctx.report is not None and ctx.report(step, loss):
                break
            if waited >= params["patience"]:
                break
        self.model_ = kept if kept is not None else estimator
        self.step_ = best[1] or len(losses)
        self.history_ = {"valid_loss": losses}

    def _fit_estimator(self, estimator, train, y, weight, c: float, params: dict) -> None:
        """Fit `estimator` at inverse penalty `c`. Where the solver stops at max_iter unconverged (a weak
        penalty on separable rows), scikit-learn warns on stderr at each such fit, many lines a fold; the
        run says it once instead, and the step's loss judges that fit as it is."""
        import warnings

        import numpy as np
        from sklearn.exceptions import ConvergenceWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            estimator.fit(train, y, sample_weight=weight)
        iterations = getattr(estimator, "n_iter_", None)  # Ridge's direct solvers: None
        if iterations is not None and int(np.max(iterations)) >= params["max_iter"]:
            say_once(log, ("max_iter", self.name, params["max_iter"]),
                     "%s: the solver stopped at max_iter=%d before converging (first at C=%.3g on %d rows); "
                     "those steps of the penalty path are scored as they stand, and model.%s.params.max_iter "
                     "raises the cap", self.name, params["max_iter"], c, train.shape[0], self.name)

    def _encoder(self, X, params: dict):
        self.categories_, self.numbers_ = column_kinds(X)
        return encoder(X, params["numeric"], params["min_frequency"])

    @staticmethod
    def _estimator(ctx: FitContext, params: dict):
        """The library's estimator for the problem; its penalty is set by `_set_c`."""
        from sklearn.linear_model import LogisticRegression, Ridge

        if ctx.problem_type == "regression":
            return Ridge(random_state=ctx.seed)
        return LogisticRegression(max_iter=params["max_iter"], warm_start=True, random_state=ctx.seed)

    @staticmethod
    def _set_c(estimator, c: float, ctx: FitContext) -> None:
        """The inverse penalty C as the library takes it: LogisticRegression's C, Ridge's alpha = 1 / C."""
        if ctx.problem_type == "regression":
            estimator.set_params(alpha=1.0 / c)
        else:
            estimator.set_params(C=c)

    def _output(self, estimator, matrix):
        if self.problem_type_ == "regression":
            return within(estimator.predict(matrix), getattr(self, "y_range_", None))
        return every_class(estimator.predict_proba(matrix), estimator.classes_, self.num_classes_)

    def _predict(self, X):
        with one_blas_thread():
            return self._output(self.model_, self.encoder_.transform(X))

    def feature_importance(self) -> Optional[dict[str, float]]:
        """Each column's summed absolute weight over its encoded columns (standardised numbers and their
        missing-value indicator, one-hot categories) and the classes."""
        import numpy as np

        weights = np.abs(np.atleast_2d(self.model_.coef_)).sum(axis=0)
        transformer = self.encoder_.columns
        out = {}
        for name, part in transformer.output_indices_.items():
            if name == "numbers":
                imputer = transformer.named_transformers_["numbers"].steps[0][1]
                block = weights[part]
                n = len(self.numbers_)
                for i, column in enumerate(self.numbers_):
                    out[column] = float(block[i])
                if imputer.indicator_ is not None:
                    for k, i in enumerate(imputer.indicator_.features_):
                        out[self.numbers_[i]] += float(block[n + k])
            elif name.startswith("category "):
                out[name[len("category "):]] = float(weights[part].sum())
        return out

    def refit_params(self, fitted):
        """A path of one step, at the geometric mean of the C the fold models kept."""
        import numpy as np

        c = float(np.exp(np.mean([np.log(_path({**OWN, **m.params})[m.step_ - 1]) for m in fitted])))
        return {"path_length": 1, "c_min": c, "c_max": c}

    def refit_share(self):
        return 1 / max(1, len(self.history_.get("valid_loss", ())))  # one penalty of the path's steps


def column_kinds(X) -> tuple[list[str], list[str]]:
    """(the category columns' names, the other columns' names) as strings."""
    categories = [str(c) for c in X.columns if X[c].dtype.name == "category"]
    return categories, [str(c) for c in X.columns if X[c].dtype.name != "category"]


def encoder(X, numeric: str, min_frequency: int) -> "_NumericFrame":
    """An unfitted encoder of X's columns: numbers median-imputed (a missing-value indicator beside each
    column with missing values) and scaled (`numeric`: standard | quantile), or standardised and spread on a
    cubic B-spline basis of 5 knots over the training range (spline), each category column one-hot
    encoded (rarer than `min_frequency` rows: one shared column; unseen or missing: none of them)."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, QuantileTransformer, SplineTransformer, StandardScaler

    categories, numbers = column_kinds(X)
    if numeric == "quantile":
        scale = [QuantileTransformer(n_quantiles=max(10, min(1000, len(X))), output_distribution="normal",
                                     subsample=100_000, random_state=0)]
    else:
        scale = [StandardScaler()]
        if numeric == "spline":  # a curve for each number, flat past the training range
            scale.append(SplineTransformer(n_knots=SPLINE_KNOTS, degree=SPLINE_DEGREE))
    parts = []
    if numbers:
        imputer = SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True)
        parts.append(("numbers", make_pipeline(imputer, *scale), numbers))
    for name in categories:
        parts.append((f"category {name}", OneHotEncoder(handle_unknown="infrequent_if_exist",
                                                        min_frequency=min_frequency), [name]))
    return _NumericFrame(ColumnTransformer(parts, sparse_threshold=0.3))


class _NumericFrame:
    """The column transformer, fed numbers as floats (an infinite value as missing) and categories as
    they are; picklable, as the predictor saves it."""

    def __init__(self, columns):
        self.columns = columns

    def fit_transform(self, X):
        return self.columns.fit_transform(self._clean(X))

    def transform(self, X):
        return self.columns.transform(self._clean(X))

    @staticmethod
    def _clean(X):
        import numpy as np

        X = X.copy(deep=False)
        X.columns = [str(c) for c in X.columns]
        for c in X.columns:
            if X[c].dtype.name != "category":
                values = X[c].to_numpy(dtype=np.float64, na_value=np.nan, copy=True)  # a float64 column's
                # own values otherwise, read-only under copy-on-write
                values[~np.isfinite(values)] = np.nan
                X[c] = values
        return X
