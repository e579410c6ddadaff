"""A logged predictor's requirements name the distribution installed, also where the import package comes
from another distribution name (mlflow-skinny for mlflow, xgboost-cu13 for xgboost)."""

from importlib import metadata

import pytest

from pipeline.models import XGBoostModel
from pipeline.tracking import models


def _installed(versions: dict):
    def version(name):
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    return version


def test_the_alternative_installed_in_place_of_a_distribution_is_named(monkeypatch):
    monkeypatch.setattr(
        models.metadata,
        "version",
        _installed(
            {
                "mlflow-skinny": "3.17.2",
                "xgboost-cu13": "3.2.0",
                "numpy": "2.5.0",
                "pandas": "3.0.0",
                "cloudpickle": "3.1.0",
                "torch": "2.11.0+cu130",
            }
        ),
    )
    assert models.requirements([XGBoostModel.profile.distributions[0]]) == [
        "mlflow-skinny==3.17.2",
        "numpy==2.5.0",
        "pandas==3.0.0",
        "cloudpickle==3.1.0",
        "xgboost-cu13==3.2.0",
    ]
    assert models.pinned("torch") == "torch==2.11.0"


def test_the_distribution_itself_comes_first_and_none_installed_raises(monkeypatch):
    monkeypatch.setattr(models.metadata, "version", _installed({"xgboost": "3.2.0", "xgboost-cpu": "3.1.0"}))
    assert models.pinned("xgboost", XGBoostModel.profile.distributions[0][1:]) == "xgboost==3.2.0"
    with pytest.raises(metadata.PackageNotFoundError):
        models.pinned("lightgbm")
