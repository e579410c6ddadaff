"""A trained predictor found through MLflow: by a run id (its best model, or one of its models by name) or
by a models:/ or runs:/ URI; the store and the model's folder are checked before anything of them is
loaded (pipeline.predictor_source finds the others, in a run directory)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pipeline.errors import ConfigError, TrackingError


def _tracking_uri(tracking_uri: Optional[str], base_dir: Path) -> str:
    """The store to read, checked first: a local one another user made or can change is refused."""
    from pipeline.tracking import default_uri, quiet_mlflow
    from pipeline.tracking.store import check_store_trusted

    quiet_mlflow()
    uri = tracking_uri or default_uri(base_dir)
    check_store_trusted(uri)
    return uri


def from_run_id(run_id: str, name: str, tracking_uri: Optional[str], base_dir: Path):
    """The predictor `name` ('best' or a model of the run) of the MLflow run `run_id`."""
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
    return from_model_uri(model_uri, uri, base_dir)


def from_model_uri(model_uri: str, tracking_uri: Optional[str], base_dir: Path):
    """The predictor of the MLflow model `model_uri` (one this engine logged)."""
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
