"""Model adapters, each declaring its kind's profile (`profile.py`). Each imports its library (and numpy,
pandas) only when it fits or predicts; their profiles and checks work without them (`native.py` reaches
the libraries' C API). Optional kinds (`catboost.py`) are named by their module in conf/model, not here."""

from pipeline.models.base import FitContext, Placement, TabularModel
from pipeline.models.lightgbm import LightGBMModel
from pipeline.models.nn import TorchMLPModel
from pipeline.models.xgboost import XGBoostModel

__all__ = ["FitContext", "Placement", "TabularModel", "LightGBMModel", "XGBoostModel", "TorchMLPModel"]
