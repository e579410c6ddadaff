"""Model adapters, each declaring its kind's profile (`profile.py`). Each imports its library (and numpy,
pandas) only when it fits or predicts; their profiles and checks work without them (`native.py` reaches
the libraries' C API). Optional kinds (`catboost.py`) are named by their module in conf/model, not here.

The default kinds' adapters are named here but imported on first use (PEP 562): a logged model ships the
engine modules its pickle's import statements reach (pipeline.tracking.shipped_code), and an import here
would make every model ship the network's loop and both boosters' adapters."""

from importlib import import_module

from pipeline.models.base import FitContext, Placement, TabularModel

_ADAPTERS = {"LightGBMModel": "lightgbm", "XGBoostModel": "xgboost", "TorchMLPModel": "nn"}

__all__ = ["FitContext", "Placement", "TabularModel", *_ADAPTERS]


def __getattr__(name: str):
    if name in _ADAPTERS:
        return getattr(import_module(f"{__name__}.{_ADAPTERS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_ADAPTERS})
