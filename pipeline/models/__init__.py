"""Model adapters. Each imports its library only when it fits."""

from pipeline.models.base import FitContext, Placement, TabularModel
from pipeline.models.lightgbm import LightGBMModel
from pipeline.models.nn import TorchMLPModel
from pipeline.models.xgboost import XGBoostModel

__all__ = ["FitContext", "Placement", "TabularModel", "LightGBMModel", "XGBoostModel", "TorchMLPModel"]
