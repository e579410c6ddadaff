"""Find a trained predictor: in a run directory, by MLflow run id, or by a models:/ or runs:/ URI (those
two through pipeline.tracking.predictors).

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

from pipeline.errors import ConfigError, closest
from pipeline.trusted import open_trusted

RUN_ID = re.compile(r"^[0-9a-f]{32}$")
PREDICTORS_DIR, BEST_FILE = "predictors", "BEST"


def load_predictor(source: str, name: str, tracking_uri: Optional[str], base_dir: Path):
    """The predictor `name` ('best' or a model of the run) that `source` names."""
    if source.startswith(("models:/", "runs:/")):
        from pipeline.tracking.predictors import from_model_uri

        return from_model_uri(source, tracking_uri, base_dir)
    path = Path(source).expanduser()
    path = path if path.is_absolute() else base_dir / path
    if path.is_dir():
        return _from_run_dir(path, name, source)
    if RUN_ID.match(source):
        from pipeline.tracking.predictors import from_run_id

        return from_run_id(source, name, tracking_uri, base_dir)
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
