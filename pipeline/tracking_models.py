"""The run's models in MLflow: each predictor as one pyfunc that serves, and the registry.

A logged model carries its signature (with the `predict_method` parameter), pinned public
requirements and the engine's own code (MLflow's `code_paths`), so `mlflow models serve` can
build its environment from PyPI alone. Used by pipeline.tracking, which owns the run.
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
import warnings
from importlib import metadata
from pathlib import Path

import pipeline

# The distributions a predictor needs at load time, besides its models' own libraries.
BASE_DISTRIBUTIONS = ("mlflow", "numpy", "pandas", "cloudpickle")
LIBRARY_DISTRIBUTIONS = {"lightgbm": "lightgbm", "xgboost": "xgboost", "torch": "torch"}


def pinned(distribution: str) -> str:
    """'name==version' of the installed distribution, without a local build tag (torch's '+cpu'),
    so that the package index can serve it."""
    return f"{distribution}=={metadata.version(distribution).split('+', 1)[0]}"


def requirements(predictor) -> list[str]:
    """Pinned requirements of a predictor: the base set and the libraries of its models only."""
    libraries = sorted(LIBRARY_DISTRIBUTIONS[m] for m in predictor.libraries if m in LIBRARY_DISTRIBUTIONS)
    return [pinned(d) for d in (*BASE_DISTRIBUTIONS, *libraries)]


def engine_code(folder: Path) -> Path:
    """A copy of the `pipeline` package to ship with a model: code only, no bundled data."""
    source = Path(pipeline.__file__).parent
    target = folder / "pipeline"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.parquet", "conf"))
    return target


def log_pyfunc(name: str, predictor, example) -> str:
    """Log `predictor` as the pyfunc model `name` of the active run; returns its model URI."""
    import mlflow
    from mlflow.models import infer_signature

    code = Path(pipeline.__file__).parent / "mlflow_model.py"
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Integer columns in Python cannot represent missing values.*")
        artifact = Path(tmp) / "predictor.pkl"
        artifact.write_bytes(pickle.dumps(predictor, protocol=pickle.HIGHEST_PROTOCOL))
        signature = infer_signature(example, predictor.predict(example), params={"predict_method": "predict"})
        info = mlflow.pyfunc.log_model(
            name=name,
            python_model=str(code),
            artifacts={"predictor": str(artifact)},
            code_paths=[str(engine_code(Path(tmp) / "code"))],
            signature=signature,
            input_example=example,
            pip_requirements=requirements(predictor),
        )
    return info.model_uri


def register(model_uri: str, name: str, alias: str) -> str:
    """Register the model under `name` and point `alias` at the new version; returns the version."""
    import mlflow

    version = mlflow.register_model(model_uri, name).version
    mlflow.MlflowClient().set_registered_model_alias(name, alias, version)
    return str(version)
