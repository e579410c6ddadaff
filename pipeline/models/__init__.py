"""Model adapters. Each imports its library (and numpy, pandas) only when it fits or predicts; their
class attributes and checks work without them (`native.py` reaches the libraries' C API)."""

from pipeline.models.base import FitContext, Placement, TabularModel
from pipeline.models.lightgbm import LightGBMModel
from pipeline.models.nn import TorchMLPModel
from pipeline.models.xgboost import XGBoostModel

__all__ = ["FitContext", "Placement", "TabularModel", "LightGBMModel", "XGBoostModel", "TorchMLPModel"]
