"""The MLflow work of one tracked run, alone: no data load for fitting, no fit, no engine run.

`python -m bench.mlflow_alone RUN_DIR EXAMPLE` imports MLflow, opens the SQLite store under ./outputs (as a
run started here does), starts a run with the parameters, metrics and tags a `model=lightgbm` run
logs, logs RUN_DIR's predictor as the pyfunc model (its signature from EXAMPLE, a pickle of the
rows the engine would pass) and RUN_DIR's files as artifacts, and ends the run:
what a tracked run's tracker process does, through the engine's own MlflowTracker. It prints its
CPU seconds as JSON. Whole-process wall time (measured by the caller) is the floor a tracked run's
overhead cannot go below on a box with no core to spare for it.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path


def main(run_dir: Path, example_path: Path) -> dict:
    import numpy as np
    import pandas as pd  # MLflow imports it too

    from pipeline.tracking.mlflow_run import MlflowTracker
    from pipeline.tracking.models import ModelPayload
    from pipeline.tracking.store import Store

    scores = pd.read_csv(run_dir / "leaderboard.csv").select_dtypes("number").iloc[0]
    tracker = MlflowTracker(Store.of(None, Path.cwd()), "mlflow-alone")
    tracker.connect()
    params = {f"param_{i}": i for i in range(100)}  # a model=lightgbm run logs about a hundred
    tracker.start("mlflow alone", params, {"pipeline.source": "bench.mlflow_alone"})
    tracker.log_metrics({f"lightgbm/{k}": float(v) for k, v in scores.items()})
    tracker.log_history("lightgbm", {"valid_binary_logloss": list(np.linspace(0.6, 0.3, 150))})
    example = pickle.loads(example_path.read_bytes())
    predictor = (run_dir / "predictors" / "lightgbm.pkl").read_bytes()
    payload = ModelPayload(predictor, ("lightgbm",), example, np.zeros((len(example), 2)))
    tracker.log_predictor("lightgbm", payload, example)
    tracker.set_tags({"best/model": "lightgbm"})
    for path in sorted(run_dir.glob("*")):
        if path.is_file() and path.suffix in (".json", ".csv", ".png", ".yaml"):
            tracker.log_artifact(path)
    tracker.end("FINISHED")
    times = os.times()
    return {"cpu_s": times.user + times.system, "failure": tracker.failure}


def write_example(path: Path) -> None:
    """Pickle five rows of the bundled Adult data as the engine hands them to the tracker."""
    from pipeline.config import DataConf
    from pipeline.data import load
    from pipeline.graph.nodes.evaluate import _raw_example

    path.write_bytes(pickle.dumps(_raw_example(load(DataConf(), Path(__file__).resolve().parents[1]))))


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]))))
