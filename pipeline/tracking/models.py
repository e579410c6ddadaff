"""The run's models in MLflow: each predictor as one pyfunc that serves, and the registry.

A logged model carries its signature (with the `predict_method` parameter), pinned public
requirements and the engine's code it loads with (MLflow's `code_paths`: pipeline.tracking.shipped_code),
so `mlflow models serve` can build its environment from PyPI alone. Used by pipeline.tracking, which owns
the run.

The model is logged from its pickle, with the signature inferred from a few rows and what the
predictor returned for them (`ModelPayload`, made where the predictor lives): the process that logs
it never imports the model's library. No input example goes with it: MLflow would load the model
and predict once more to check that example, which is the work the payload saves.
"""

from __future__ import annotations

import pickle
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

import pipeline

# The step the models are logged at. MLflow links a model to every metric its run holds at the model's step,
# and the run's scores are all at step 0 (a learning curve's at 0 and up): at step 0 each model would carry
# the ensemble's scores and every other model's. No metric is logged at this step; each model gets its
# own scores instead (log_model_metrics).
MODEL_STEP = -1

# The distributions a predictor needs at load time, besides its models' own (their kinds' profiles say
# those, pipeline.models.profile.ModelProfile.distributions).
BASE_DISTRIBUTIONS = ("mlflow", "numpy", "pandas", "cloudpickle")


# The same import package under other distribution names: MLflow's client alone. The predictor's
# requirements name the one installed.
ALTERNATIVES = {"mlflow": ("mlflow-skinny",)}


def pinned(distribution: str, alternatives: tuple[str, ...] = ()) -> str:
    """'name==version' of the installed distribution (or of an alternative installed in its place),
    without a local build tag (torch's '+cpu'), so that the package index can serve it."""
    for name in (distribution, *alternatives, *ALTERNATIVES.get(distribution, ())):
        try:
            return f"{name}=={metadata.version(name).split('+', 1)[0]}"
        except metadata.PackageNotFoundError:
            continue
    raise metadata.PackageNotFoundError(distribution)


def requirements(libraries) -> list[str]:
    """Pinned requirements of a predictor whose models need `libraries` (each: a distribution's name, then
    other builds of it that may be installed in its place): the base set and those only."""
    chosen = sorted(set(map(tuple, libraries)))
    return [pinned(d) for d in BASE_DISTRIBUTIONS] + [pinned(group[0], group[1:]) for group in chosen]


@dataclass(frozen=True)
class ModelPayload:
    """What logging a predictor takes: its pickle, its models' libraries, a few input rows and
    what it predicts for them (the signature's output)."""

    pickled: bytes
    libraries: tuple[tuple[str, ...], ...]  # distributions (ModelProfile.distributions)
    example: Any  # a DataFrame of raw input rows
    prediction: Any

    @classmethod
    def of(cls, predictor, example, pickled: Optional[bytes] = None) -> "ModelPayload":
        """`pickled`: the predictor's pickle where a save made it already (its file in the run folder)."""
        libraries = tuple(sorted(predictor.libraries))
        if pickled is None:
            pickled = pickle.dumps(predictor, protocol=pickle.HIGHEST_PROTOCOL)
        return cls(pickled, libraries, example, predictor.predict(example))


def log_pyfunc(name: str, payload: ModelPayload, tags: Optional[dict] = None,
               params: Optional[dict] = None) -> str:
    """Log the predictor of `payload` as the pyfunc model `name` of the active run, with `tags` (its run's
    Source: MLflow would name the process that logs it) and the run's `params` (as MLflow's log_model
    copies them; passed, not read back: reading the run reads its latest value of every metric too);
    returns its model URI."""
    import mlflow
    import mlflow.pyfunc
    from mlflow.entities import LoggedModelOutput
    from mlflow.models import infer_signature

    from pipeline.tracking.shipped_code import engine_code, pickled_modules

    active = mlflow.active_run()
    run_id = active.info.run_id if active else None
    code = Path(pipeline.__file__).parent / "tracking" / "mlflow_model.py"
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Integer columns in Python cannot represent missing values.*")
        warnings.filterwarnings("ignore", message=".*An input example was not provided.*")  # by design, above
        artifact = Path(tmp) / "predictor.pkl"
        artifact.write_bytes(payload.pickled)
        signature = infer_signature(payload.example, payload.prediction, params={"predict_method": "predict"})
        pinned_requirements = requirements(payload.libraries)
        code_paths = [str(engine_code(pickled_modules(payload.pickled)))]
        # the logged model is made after what can fail without it: from there MLflow marks it READY or FAILED
        model = mlflow.initialize_logged_model(name=name, source_run_id=run_id, tags=tags or None,
                                               params={k: str(v) for k, v in (params or {}).items()} or None)
        # Under an active run MLflow's log_model reads the whole history of every metric the run holds, one
        # query each, to link those at the model's step (none is at MODEL_STEP): models x metrics queries,
        # 3,668 for the 14 models of a stacked run, 5.7 s of its 12.5 s of tracking. Logged from a thread
        # with no active run (MLflow keeps the active run per thread), the model is linked to the run below.
        with ThreadPoolExecutor(1) as pool:
            info = pool.submit(
                mlflow.pyfunc.log_model,
                name=name,
                model_id=model.model_id,
                python_model=str(code),
                artifacts={"predictor": str(artifact)},
                code_paths=code_paths,
                signature=signature,
                pip_requirements=pinned_requirements,
            ).result()
    if run_id:
        mlflow.MlflowClient().log_outputs(run_id, models=[LoggedModelOutput(model.model_id, step=MODEL_STEP)])
    return info.model_uri


# a metric's first word -> the dataset input it was measured on: the model's fit time is the training split's
SPLIT_OF = {"val_": "validation", "test_": "test", "fit_": "training"}


def log_model_metrics(uri: str, run_id: str, model_uri: str, metrics: dict, datasets: dict) -> None:
    """A logged model's own scores and fit time (`<model>/val_roc_auc`, `<model>/fit_seconds`, as the run
    has them), linked to the model and to the dataset input of the split each was measured on
    (`datasets`: context -> (name, digest)), so the model's page lists them and the data it was trained
    and scored on."""
    import time

    import mlflow
    from mlflow.entities import Metric

    model_id = model_uri.removeprefix("models:/")
    now = int(time.time() * 1000)
    entries = []
    for key, value in metrics.items():
        if value is None or value != value:
            continue
        word = key.rpartition("/")[2]
        split = next((s for prefix, s in SPLIT_OF.items() if word.startswith(prefix)), None)
        name, digest = datasets.get(split, (None, None))
        entries.append(Metric(key, float(value), now, 0, model_id=model_id, dataset_name=name,
                              dataset_digest=digest))
    if entries:
        mlflow.MlflowClient(uri).log_batch(run_id, metrics=entries)


def register(model_uri: str, name: str, alias: str) -> str:
    """Register the model under `name` and point `alias` at the new version; returns the version."""
    import mlflow

    version = mlflow.register_model(model_uri, name).version
    mlflow.MlflowClient().set_registered_model_alias(name, alias, version)
    return str(version)


def load_logged(store_uri: str, name: str) -> tuple[Any, set[str]]:
    """The pyfunc model logged as `name` in the store at `store_uri` (its only one of that name), and the
    distribution names its requirements pin: what a user serving it gets (the conformance suite's check)."""
    import mlflow

    client = mlflow.MlflowClient(store_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    (model,) = [m for m in client.search_logged_models(experiments) if m.name == name]
    mlflow.set_tracking_uri(store_uri)
    requirements_txt = mlflow.pyfunc.get_model_dependencies(model.model_uri)
    names = {line.split("==")[0] for line in Path(requirements_txt).read_text().split()}
    return mlflow.pyfunc.load_model(model.model_uri), names
