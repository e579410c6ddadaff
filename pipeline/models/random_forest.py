"""Random forests (Breiman, 2001) through scikit-learn's RandomForest, on the CPU.

Each tree grows on a bootstrap sample of the rows and splits on the best threshold among a random
subset of the features; the forest averages them. Beside extremely randomised trees (whose thresholds
are drawn at random) it is the forest FLAML and AutoGluon fit among their defaults. Everything but the
estimator is the extra-trees kind's (pipeline/models/extra_trees.py): growth in steps of
`trees_per_step` trees stopped where the validation loss flattens or at the deadline, categories as
their codes, missing values as NaN (scikit-learn's trees send them to the side that splits best).
"""

from __future__ import annotations

import dataclasses

from pipeline.models.extra_trees import PROFILE as EXTRA_TREES_PROFILE
from pipeline.models.extra_trees import ExtraTreesModel

PROFILE = dataclasses.replace(
    EXTRA_TREES_PROFILE,
    portfolio=(  # after the model's own params (scikit-learn's defaults: a square root of the features per
        # split on classes, all of them on a number): smoother forests, on half of them or a square root
        {"max_features": 0.5, "min_samples_leaf": 3},
        {"max_features": "sqrt", "min_samples_leaf": 5},
    ),
)


class RandomForestModel(ExtraTreesModel):
    profile = PROFILE
    estimators = ("RandomForestRegressor", "RandomForestClassifier")
