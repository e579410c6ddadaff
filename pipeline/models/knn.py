"""k nearest neighbours through scikit-learn's NearestNeighbors, on the CPU.

A row is predicted from the training rows closest to it: their labels' mean, or each class's share of
their votes. It memorises what trees can only approximate (rows repeated with their label, a label that
follows a neighbourhood), and AutoGluon fits two such models among its defaults. Its one hyperparameter
that matters, the number of neighbours k, is chosen by each fit itself: the fit finds the `n_neighbors`
nearest training rows of every validation row once, then scores k = 1, 2, 3, 5, 8, ... up to
`n_neighbors` (each about 1.5 times the last), each neighbour counted alike (`uniform`) and weighed by
its inverse distance (`distance`; a row at distance 0 takes all the weight), and keeps the pair with the
lowest validation loss (`weights: auto`; or the weighting named); a refit on every row uses the pair
its folds kept. A class's probability is its share of the votes with `prior_weight` more votes spread
by the training rows' class shares, so a class no neighbour holds is unlikely, not impossible (a log
loss of infinity would end the ensemble's use of the model).
Numbers are imputed with their training median (a missing-value indicator beside each column with
missing values) and standardised (`numeric: standard`) or mapped through their quantiles onto a normal
(`numeric: quantile`); categories are one-hot encoded (as the linear model's); distances are
Minkowski's with power `p` (1: the sum of absolute differences, 2: Euclidean).
The predictor's memory grows with the training rows times their encoded columns, a fit's query with the
validation rows times that, compared as dense rows by brute force (`dense`; on Adult, 25,000 training
rows: 1.6 s a fold on one CPU): hpo=auto adds this kind only on binary tables small for the budget, and
only where a bag's queries would take at most a tenth of the limit (`bag_seconds`; docs/time_budget.md).
"""

from __future__ import annotations

import time

from pipeline.errors import ConfigError
from pipeline.models.base import FitContext, TabularModel
from pipeline.models.fold_loss import validation_loss
from pipeline.models.linear import encoder
from pipeline.models.own_params import checked
from pipeline.models.profile import MiB, ModelProfile

OWN = {"n_neighbors": 100, "weights": "auto", "p": 2, "prior_weight": 1.0, "numeric": "standard",
       "min_frequency": 1}
WEIGHTS = ("auto", "uniform", "distance")
NUMERIC = ("standard", "quantile")
LADDER_GROWTH = 1.5  # each k tried about this many times the last


def memory(params: dict, fit, on_gpu: bool):
    """The encoded training rows as float32 (`dense`, `encoded_columns`), kept by the index and the
    predictor, and the queried rows'; each queried row's nearest neighbours, their distances and row
    numbers (scikit-learn reduces the distances in chunks as it goes: on Adult the whole 5-fold bag peaked
    at 378 MiB, against 2,375 MiB when the one-hot rows stayed sparse)."""
    from pipeline.memory.estimates import Estimate, feature_bytes

    rows = fit.train + fit.held_out
    most = min(int({**OWN, **params}["n_neighbors"]), max(fit.train, 1))
    parts = {
        "fold_copies": rows * feature_bytes(fit),
        "matrix": 2 * rows * encoded_columns(fit.data) * 4,
        "neighbours": fit.held_out * most * 16,
        "runtime": 20 * MiB,
    }
    return Estimate(0, 0, parts)


# One CPU compares a queried row with a training row in about (SELECT_COLUMNS + encoded columns) x
# PAIR_COLUMN_SECONDS: BLAS's products, and choosing the nearest 100 of each row's distances, which weighs as
# 42 columns do. Dense float32 rows by brute force, one thread, 100 neighbours: 60,000 training rows of 10
# random numbers 3.4e-9 s a pair, 20,000 x 40 5.6e-9, 30,720 x 107 8.1e-9, 10,000 x 200 1.6e-8.
PAIR_COLUMN_SECONDS = 6.5e-11
SELECT_COLUMNS = 42
# encoded columns: a number's value and maybe a missing-value indicator; a category's one-hot columns, of
# which the table's shape knows only a guess (Adult's 8 category columns encode to 101)
COLUMNS_PER_NUMBER = 2
COLUMNS_PER_CATEGORY = 12


def encoded_columns(shape) -> int:
    """About how many columns the encoder makes of the table's (pipeline.memory.shape.DataShape)."""
    return COLUMNS_PER_NUMBER * shape.numeric + COLUMNS_PER_CATEGORY * shape.categorical


def bag_seconds(rows: int, shape) -> float:
    """Rough seconds of a 5-fold bag on `rows` training rows and its test rows' prediction, on one CPU:
    each fold compares its fifth of the rows with the other four fifths (0.8 rows² pairs in all), and each
    fold model the test rows (about a quarter as many) with its four fifths (1.0 rows²). Adult (39,073
    training rows, 6 number and 8 category columns): 27 s estimated; the bag and its test rows took 22 s
    of a whole run's wall time on two CPUs."""
    return (0.8 + 1.0) * rows * rows * (SELECT_COLUMNS + encoded_columns(shape)) * PAIR_COLUMN_SECONDS


PROFILE = ModelProfile(
    library="scikit-learn",
    accelerators=frozenset({"cpu"}),
    modules=("sklearn.neighbors", "sklearn.preprocessing", "sklearn.compose"),
    distributions=(("scikit-learn",),),
    memory=memory,
    import_bytes=40 * MiB,  # sklearn.neighbors with scipy beside numpy and pandas
    memory_hint="fewer rows (data.max_rows), or a larger model.{name}.params.min_frequency (fewer one-hot "
                "columns)",
    thread_serial_share=0.2,  # the distances of the query's chunks are computed on the fit's threads
    portfolio=({"numeric": "quantile"}, {"p": 1}),  # skewed numbers; the sum of absolute differences
    quick=(("n_neighbors", 30),),
    bag_seconds=bag_seconds,
    packed="index_",  # dense one-hot rows: Adult's fold of 31,000 rows 13.3 MB, 1.1 MB compressed in 0.04 s
)


def dense(encoded):
    """The encoded rows as a dense float32 array. scikit-learn compares sparse rows (one-hot categories)
    pair by pair, and with few columns walks a k-d tree: on Adult (30,720 training rows, 107 encoded
    columns, 7,680 queried) a query took 9.7 s sparse and 0.9 s dense through BLAS (1.0 s in float32, at
    half the memory); 60,000 rows of 10 random numbers 9.7 s through the tree and 2.2 s by brute force."""
    import numpy as np

    encoded = encoded.toarray() if hasattr(encoded, "toarray") else encoded
    return np.asarray(encoded, dtype=np.float32)


def ladder(most: int) -> list[int]:
    """k = 1, 2, 3, 5, 8, ..., each about LADDER_GROWTH times the last, up to `most` (always included)."""
    out, k = [], 1.0
    while round(k) < most:
        if not out or round(k) > out[-1]:
            out.append(round(k))
        k *= LADDER_GROWTH
    return out + [most]


def neighbour_weights(distances, weighting: str):
    """Each of a row's neighbours' weight, summing to their count per row: alike (`uniform`), or by
    inverse distance (`distance`), where a row with neighbours at distance 0 weighs only those (as
    scikit-learn's KNeighbors estimators do)."""
    import numpy as np

    k = distances.shape[1]
    if weighting == "uniform":
        return np.ones_like(distances)
    with np.errstate(divide="ignore"):
        inverse = 1.0 / distances
    exact = distances == 0
    on_a_row = exact.any(axis=1)
    inverse[on_a_row] = exact[on_a_row]
    return inverse * (k / inverse.sum(axis=1, keepdims=True))


class KNeighborsModel(TabularModel):
    profile = PROFILE

    @classmethod
    def gpu_request(cls, params):
        return False, False, ""

    @classmethod
    def check_params(cls, name, params, problem_type=None):
        own = checked(name, params, OWN, "the k-nearest-neighbours model",
                      whole=("n_neighbors", "min_frequency"),
                      choices=(("weights", WEIGHTS), ("numeric", NUMERIC)))
        if own["p"] not in (1, 2) or isinstance(own["p"], bool):
            raise ConfigError(f"model.{name}.params.p={own['p']!r} must be 1 (the sum of absolute "
                              "differences) or 2 (Euclidean distance)")
        if isinstance(own["prior_weight"], bool) or not isinstance(own["prior_weight"], (int, float)) \
                or own["prior_weight"] < 0:
            raise ConfigError(f"model.{name}.params.prior_weight={own['prior_weight']!r} must be a number "
                              ">= 0 (votes spread by the training rows' class shares)")

    # ---- fitting
    def _fit(self, X, y, X_val, y_val, ctx: FitContext) -> None:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=ctx.placement.num_cpus):
            self._fit_index(X, y, X_val, y_val, ctx)

    def _fit_index(self, X, y, X_val, y_val, ctx: FitContext) -> None:
        import numpy as np
        from sklearn.neighbors import NearestNeighbors

        params = {**OWN, **self.params}
        started = time.perf_counter()
        self.encoder_ = encoder(X, params["numeric"], params["min_frequency"])
        train = dense(self.encoder_.fit_transform(X))
        most = min(params["n_neighbors"], len(y))
        threads = ctx.placement.num_cpus
        self.index_ = NearestNeighbors(n_neighbors=most, p=params["p"], algorithm="brute",
                                       n_jobs=threads).fit(train)
        self.labels_ = np.asarray(y, dtype=np.float64 if ctx.problem_type == "regression" else np.int64)
        weight, _ = ctx.row_weights(y, y_val)
        self.row_weights_ = None if weight is None else np.asarray(weight, dtype=np.float64)
        if ctx.problem_type != "regression":
            counts = np.bincount(self.labels_, weights=self.row_weights_, minlength=ctx.num_classes)
            self.prior_ = counts / counts.sum()
        built = time.perf_counter() - started
        if not len(y_val):  # a refit on every row: the neighbours and weighting its folds kept
            self.k_, self.weighting_ = most, "uniform" if params["weights"] == "auto" else params["weights"]
            self.history_, self.share_ = {}, 1.0
            return
        distances, neighbours = self.index_.kneighbors(dense(self.encoder_.transform(X_val)))
        weightings = ("uniform", "distance") if params["weights"] == "auto" else (params["weights"],)
        losses, best = [], (np.inf, 1, weightings[0], None)
        for k in ladder(most):
            step = np.inf
            for weighting in weightings:
                pred = self._vote(distances[:, :k], neighbours[:, :k], weighting)
                loss = validation_loss(y_val, pred, ctx.problem_type)
                step = min(step, loss)
                if loss < best[0]:
                    best = (loss, k, weighting, pred)
            losses.append(step)
        _, self.k_, self.weighting_, self.validation_raw_ = best
        self.history_ = {"valid_loss": losses}
        # a refit builds the index and queries nothing
        self.share_ = built / max(time.perf_counter() - started, 1e-9)
        if ctx.report is not None:
            ctx.report(1, best[0])

    def _vote(self, distances, neighbours, weighting: str):
        """The neighbours' labels' weighted mean, or each class's weighted share of their votes with
        `prior_weight` votes spread by the class shares."""
        import numpy as np

        weights = neighbour_weights(distances, weighting)
        if self.row_weights_ is not None:
            weights = weights * self.row_weights_[neighbours]
        labels = self.labels_[neighbours]
        if self.problem_type_ == "regression":
            return (weights * labels).sum(axis=1) / weights.sum(axis=1)
        prior_weight = float({**OWN, **self.params}["prior_weight"])
        votes = np.zeros((len(labels), self.num_classes_))
        rows = np.repeat(np.arange(len(labels)), labels.shape[1])
        np.add.at(votes, (rows, labels.ravel()), weights.ravel())
        votes += prior_weight * self.prior_
        return votes / votes.sum(axis=1, keepdims=True)

    def _predict(self, X):
        from threadpoolctl import threadpool_limits

        threads = getattr(self, "predict_threads_", None) or 1
        with threadpool_limits(limits=threads):
            self.index_.set_params(n_jobs=threads)
            queried = dense(self.encoder_.transform(X))
            distances, neighbours = self.index_.kneighbors(queried, n_neighbors=self.k_)
        return self._vote(distances, neighbours, self.weighting_)

    def refit_params(self, fitted):
        """The weighting most folds kept, at the geometric mean of the numbers of neighbours they kept."""
        import numpy as np

        ks = [m.k_ for m in fitted]
        weightings = [m.weighting_ for m in fitted]
        return {"n_neighbors": max(1, round(float(np.exp(np.mean(np.log(ks)))))),
                "weights": max(sorted(set(weightings)), key=weightings.count)}

    def refit_share(self):
        return min(1.0, max(self.share_, 1e-3))
