"""The engine's model kinds through the model conformance suite (pipeline.testing.model_conformance)."""

from pipeline.models import LightGBMModel, TorchMLPModel, XGBoostModel
from pipeline.testing.model_conformance import ModelKindConformance


class TestLightGBM(ModelKindConformance):
    model_class = LightGBMModel
    config = "lightgbm"
    typo = ("num_leavs", "num_leaves")


class TestXGBoost(ModelKindConformance):
    model_class = XGBoostModel
    config = "xgboost"
    typo = ("max_dept", "max_depth")


class TestNetwork(ModelKindConformance):
    model_class = TorchMLPModel
    config = "nn"
    typo = ("dropuot", "dropout")
