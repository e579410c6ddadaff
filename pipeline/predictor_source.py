"""Find a trained predictor: in a run directory, by MLflow run id, or by a models:/ or runs:/ URI.

Every source gives the same object (pipeline.ensemble's BaggedPredictor, StackedPredictor or EnsemblePredictor),
so batch prediction does not depend on where the model was found. A run directory's predictors (and its
BEST file, which names one) are read only after pipeline.trusted's checks: UntrustedFile otherwise.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Optional

from pipeline.errors import ConfigError, TrackingError, closest
from pipeline.trusted import open_trusted

RUN_ID = re.compile(r"^[0-9a-f]{32}$")
PREDICTORS_DIR, BEST_FILE = "predictors", "BEST"


def load_predictor(source: str, name: str, tracking_uri: Optional[str], base_dir: Path):
    """The predictor `name` ('best' or a model of the run) that `source` names."""
    if source.startswith(("models:/", "runs:/")):
        return _from_mlflow(source, tracking_uri, base_dir)
    path = Path(source).expanduser()
    path = path if path.is_absolute() else base_dir / path
    if path.is_dir():
        return _from_run_dir(path, name, source)
    if RUN_ID.match(source):
        return _from_run_id(source, name, tracking_uri, base_dir)
    raise ConfigError(
        f"source={source!r} is neither a run directory, an MLflow run id (32 hex digits) nor a models:/ or "
        "runs:/ URI"
    )


def _from_run_dir(run_dir: Path, name: str, source: str):
    folder = run_dir / PREDICTORS_DIR
    if not folder.is_dir():
        raise ConfigError(f"source={source!r} holds no trained predictors ({PREDICTORS_DIR}/ is missing): "
                          "name the directory of a run that finished")
    if name == "best":
        with open_trusted(folder / BEST_FILE) as fh:
            name = fh.read().decode().strip()
    path = folder / f"{name}.pkl"
    if not os.path.lexists(path):  # a dangling symlink is there, and refused by open_trusted
        names = sorted(p.stem for p in folder.glob("*.pkl"))
        raise ConfigError(f"predictor={name!r} is not a model of run {source}{closest(name, names)}; "
                          f"its models: best, {', '.join(names)}")
    with open_trusted(path) as fh:
        return pickle.load(fh)


def _tracking_uri(tracking_uri: Optional[str], base_dir: Path) -> str:
    """The store to read, checked first: a local one another user made or can change is refused."""
    from pipeline.tracking import default_uri, quiet_mlflow
    from pipeline.tracking.store import check_store_trusted

    quiet_mlflow()
    uri = tracking_uri or default_uri(base_dir)
    check_store_trusted(uri)
    return uri


def _from_run_id(run_id: str, name: str, tracking_uri: Optional[str], base_dir: Path):
    import mlflow
    from mlflow.exceptions import MlflowException

    from pipeline.redact import redact_uri

    uri = _tracking_uri(tracking_uri, base_dir)
    try:
        run = mlflow.MlflowClient(uri).get_run(run_id)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise ConfigError(f"source={run_id}: no MLflow run has this id in tracking.uri={redact_uri(uri)}") from None
        raise TrackingError(f"tracking.uri={redact_uri(uri)}: cannot read run {run_id}: {exc}") from None
    if name == "best":
        model_uri = run.data.tags.get("best/model_uri")
        if model_uri is None:
            raise ConfigError(f"source={run_id}: the run logged no best model (tracking.log_models=false, or it "
                              "did not finish)")
        if not model_uri.startswith(("runs:/", "models:/")):  # the engine tags only these, of this store
            raise ConfigError(f"source={run_id}: the run's best/model_uri tag is {model_uri!r}, not a runs:/ "
                              "or models:/ URI of this store as the engine writes it; it was changed after "
                              "the run, so it is not followed")
    else:
        model_uri = f"runs:/{run_id}/{name}"
    return _from_mlflow(model_uri, uri, base_dir)


def _from_mlflow(model_uri: str, tracking_uri: Optional[str], base_dir: Path):
    import mlflow
    from mlflow.exceptions import MlflowException

    mlflow.set_tracking_uri(_tracking_uri(tracking_uri, base_dir))
    try:
        model = mlflow.pyfunc.load_model(_checked_model_folder(model_uri))
    except MlflowException as exc:
        raise ConfigError(f"source={model_uri}: MLflow cannot load it: {str(exc).splitlines()[0]}") from None
    predictor = getattr(model.unwrap_python_model(), "predictor", None)  # read by pipeline.trusted
    if predictor is None:
        raise ConfigError(f"source={model_uri} is an MLflow model, but not one this engine logged")
    return predictor


def _checked_model_folder(model_uri: str) -> str:
    """The local folder of the model `model_uri` names, every file and folder in it checked
    (pipeline.trusted.check_tree): loading an MLflow model runs its code and unpickles its artifacts. A
    local store's artifacts are read where they are (MLflow copies nothing); a server's are downloaded
    into a new folder of this user's."""
    from mlflow.tracking.artifact_utils import _download_artifact_from_uri

    from pipeline.trusted import check_tree

    folder = _download_artifact_from_uri(model_uri)
    check_tree(folder, f"the MLflow model {model_uri}")
    return folder
