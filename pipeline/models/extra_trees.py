"""Extremely randomised trees (Geurts et al., 2006) through scikit-learn's ExtraTrees, on the CPU.

A forest averages deep trees whose splits' thresholds are drawn at random: smooth where boosted trees
are step-like, so it adds to an ensemble of GBMs what they lack (AutoGluon fits such forests among its
defaults). The forest grows `trees_per_step` trees at a time (scikit-learn's warm start); after each
step its validation loss (log loss, or squared error) is reported, the run's deadline checked, and the
growth stops after `patience` steps that did not lower it by a share `tol`, keeping the trees up to the
best step (more trees than that cost time and memory for nothing: a forest's loss flattens, it does not
turn back up).
Categorical columns go in as their integer codes (fixed by the engine's schema); missing values, and
a missing or unseen category, as NaN, which scikit-learn's random splitter sends left or right.
"""

from __future__ import annotations

from typing import Optional

from pipeline.errors import ConfigError, closest
from pipeline.models.base import FitContext, RoundClock, TabularModel
from pipeline.models.fold_loss import every_class, validation_loss
from pipeline.models.profile import MiB, ModelProfile

OWN = {"trees_per_step": 20, "patience": 2, "tol": 0.001}  # the engine's growth schedule, not scikit-learn's
# threads follow the fit's placement; the growth is the engine's
ENGINE_SET = ("n_jobs", "warm_start", "verbose")
WEIGHED_BY_ENGINE = ("class_weight",)  # data.class_weight weighs every model kind's rows alike
NODE_BYTES = 64  # scikit-learn's tree node record, besides its values


def memory(params: dict, fit, on_gpu: bool):
    """A fully grown tree has about 2 x rows / min_samples_leaf nodes, each a 64-byte record and its
    values (one per class, or one); the forest keeps n_estimators of them, and the fit a float32 copy of
    its rows."""
    from pipeline.memory.estimates import Estimate, feature_bytes

    trees = int(params.get("n_estimators", 100))
    leaf = max(1, int(params.get("min_samples_leaf", 1)))
    nodes = 2 * fit.train // leaf
    if params.get("max_leaf_nodes"):
        nodes = min(nodes, 2 * int(params["max_leaf_nodes"]))
    values = 8 * max(1, fit.classes)
    parts = {
        "fold_copies": (fit.train + fit.held_out) * feature_bytes(fit),
        "matrix": (fit.train + fit.held_out) * fit.features * 4,
        "trees": trees * nodes * (NODE_BYTES + values),
        "runtime": 20 * MiB,
    }
    return Estimate(0, 0, parts)


PROFILE = ModelProfile(
    library="scikit-learn",
    accelerators=frozenset({"cpu"}),
    modules=("sklearn.ensemble",),
    distributions=(("scikit-learn",),),
    memory=memory,
    import_bytes=45 * MiB,  # sklearn.ensemble with scipy: its RSS beside numpy and pandas (the 2-core box)
    memory_hint="a smaller model.{name}.params.n_estimators, or a larger min_samples_leaf",
    thread_serial_share=0.1,  # the trees of a step grow on their own threads
    portfolio=(  # scikit-learn's classification default (a square root of the features per split); a
        # smoother forest on half of them
        {"max_features": "sqrt", "min_samples_leaf": 1},
        {"max_features": 0.5, "min_samples_leaf": 3},
    ),
    quick=(("n_estimators", 40),),
    packed="model_",  # whole trees: 27 MB a fold on 2,164 rows, 6 MB compressed
)


class ExtraTreesModel(TabularModel):
    profile = PROFILE
    # scikit-learn's forest for (regression, classification); a forest kind of its own names its pair
    estimators = ("ExtraTreesRegressor", "ExtraTreesClassifier")

    @classmethod
    def _estimator_class(cls, problem_type: str):
        from sklearn import ensemble

        return getattr(ensemble, cls.estimators[problem_type != "regression"])

    @classmethod
    def _estimator(cls, problem_type: str, params: dict):
        return cls._estimator_class(problem_type)(**params)

    @classmethod
    def gpu_request(cls, params):
        return False, False, ""

    @classmethod
    def check_params(cls, name, params, problem_type=None):
        """Each key against the estimator of the table's problem type (both, where it is not known yet)."""
        import inspect

        kinds = [problem_type] if problem_type else ["regression", "binary"]
        classes = [cls._estimator_class(kind) for kind in kinds]
        known = set().union(*(inspect.signature(c.__init__).parameters for c in classes)) - {"self"}
        for key in params:
            if key in ENGINE_SET:
                raise ConfigError(f"model.{name}.params.{key} is set by the engine (threads follow the fit's "
                                  "placement; the forest grows trees_per_step trees at a time); remove it")
            if key in WEIGHED_BY_ENGINE and key in known:
                raise ConfigError(f"model.{name}.params.{key}={params[key]!r}: the engine weighs the "
                                  "classes' rows itself, the same way for every model: set data.class_weight "
                                  "(none | balanced) and remove this key")
            if key not in known and key not in OWN:
                raise ConfigError(f"model.{name}.params.{key} is not a parameter of scikit-learn's "
                                  f"{' or '.join(c.__name__ for c in classes)}"
                                  f"{closest(key, known | set(OWN))}")
        library = {k: v for k, v in params.items() if k not in OWN}
        rejected = []
        for kind in kinds:  # where the problem type is not known yet, one estimator taking them is enough
            try:
                cls._estimator(kind, library)._validate_params()
                break
            except (ValueError, TypeError) as exc:  # scikit-learn's InvalidParameterError is a ValueError
                rejected.append(exc)
        else:
            raise ConfigError(f"model.{name}.params: scikit-learn rejects them: {rejected[0]}") from None
        for key in ("trees_per_step", "patience"):
            if key in params and (not isinstance(params[key], int) or params[key] < 1):
                raise ConfigError(f"model.{name}.params.{key}={params[key]!r} must be a whole number >= 1")
        if "tol" in params and not (isinstance(params["tol"], (int, float)) and params["tol"] >= 0):
            raise ConfigError(f"model.{name}.params.tol={params['tol']!r} must be a number >= 0 "
                              "(a share of the loss)")

    # ---- fitting
    def _fit(self, X, y, X_val, y_val, ctx: FitContext) -> None:
        self.columns_ = [str(c) for c in X.columns]
        self._grow(self._matrix(X), y, self._matrix(X_val), y_val, ctx)

    def _fit_rows(self, X, y, train_rows, val_rows, ctx: FitContext) -> None:
        self.columns_ = [str(c) for c in X.columns]
        train, held = self._matrix(X.iloc[train_rows]), self._matrix(X.iloc[val_rows])
        self._grow(train, y[train_rows], held, y[val_rows], ctx)

    @staticmethod
    def _matrix(X):
        """float32 rows: numbers as they are, categories as their codes, missing values as NaN."""
        import numpy as np

        def column(values):
            if values.dtype.name == "category":  # code -1: missing or unseen
                codes = values.cat.codes.to_numpy()
                return np.where(codes < 0, np.nan, codes).astype(np.float32)
            return values.to_numpy(dtype=np.float32, na_value=np.nan)

        out = np.column_stack([column(X[c]) for c in X.columns]) if len(X.columns) else \
            np.empty((len(X), 0), np.float32)
        out[np.isinf(out)] = np.nan
        return np.ascontiguousarray(out)

    def _grow(self, X, y, X_val, y_val, ctx: FitContext) -> None:
        import numpy as np

        own = {**OWN, **{k: v for k, v in self.params.items() if k in OWN}}
        params = {k: v for k, v in self.params.items() if k not in OWN}
        cap = int(params.pop("n_estimators", 100))
        params.setdefault("random_state", ctx.seed)
        forest = self._estimator(ctx.problem_type, {**params, "n_jobs": ctx.placement.num_cpus,
                                                    "warm_start": True, "n_estimators": 0})
        weight, _ = ctx.row_weights(y, y_val)
        total, losses, best, waited, clock = None, [], (np.inf, 0), 0, RoundClock(ctx)
        while forest.n_estimators < cap and waited < own["patience"]:
            if forest.n_estimators and clock.out_of_time():  # the first step always grows
                break
            start = forest.n_estimators
            forest.set_params(n_estimators=min(cap, start + own["trees_per_step"]))
            forest.fit(X, y, sample_weight=weight)
            if not len(y_val):  # a refit on every row: no validation rows, the length is given
                continue
            added = sum(self._tree_output(tree, forest, X_val) for tree in forest.estimators_[start:])
            total = added if total is None else total + added
            loss = validation_loss(y_val, total / forest.n_estimators, ctx.problem_type)
            losses.append(loss)
            if loss < best[0] - abs(best[0]) * own["tol"] if np.isfinite(best[0]) else True:
                best, waited = (loss, forest.n_estimators), 0
            else:
                waited += 1
            if ctx.report is not None and ctx.report(forest.n_estimators, loss):
                break
        kept = best[1] or forest.n_estimators
        self.grown_ = forest.n_estimators
        forest.estimators_ = forest.estimators_[:kept]
        forest.set_params(n_estimators=kept, warm_start=False)
        self.model_, self.trees_ = forest, kept
        self.history_ = {"valid_loss": losses}

    def _tree_output(self, tree, forest, X):
        """One tree's predictions on X: values, or probabilities over every class of the problem (a fold may
        lack one)."""
        if self.problem_type_ == "regression":
            return tree.predict(X, check_input=False)
        return self._every_class(tree.predict_proba(X, check_input=False), forest.classes_)

    def _every_class(self, proba, classes):
        return every_class(proba, classes, self.num_classes_)

    def _predict(self, X):
        self.model_.set_params(n_jobs=getattr(self, "predict_threads_", None) or 1)
        matrix = self._matrix(X)
        if self.problem_type_ == "regression":
            return self.model_.predict(matrix)
        return self._every_class(self.model_.predict_proba(matrix), self.model_.classes_)

    def feature_importance(self) -> Optional[dict[str, float]]:
        return {c: float(g) for c, g in zip(self.columns_, self.model_.feature_importances_)}

    def refit_params(self, fitted):
        import numpy as np

        return {"n_estimators": max(1, round(float(np.mean([m.trees_ for m in fitted])))), "patience": 10**6}

    def refit_share(self):
        return self.trees_ / max(1, getattr(self, "grown_", self.trees_), self.trees_)
