"""Load a logged model with only the engine code it ships, in a fresh process: for the conformance suites.

The process drops every `sys.path` entry holding a `pipeline` package before it imports anything, so the
engine's modules can come only from the model's `code` folder (MLflow puts it first on the path); it
loads the model by name, predicts the rows, and reports where each engine module it imported came from.
A module the model needs and does not ship fails the load (ModuleNotFoundError).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

# a script's first lines: no engine on the path (an installed one, the checkout's, the working directory's)
WITHOUT_ENGINE = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path = [p for p in sys.path if not (Path(p or ".") / "pipeline" / "__init__.py").is_file()]
""")

SCRIPT = WITHOUT_ENGINE + textwrap.dedent("""
    import json
    assert "pipeline" not in sys.modules
    import mlflow, pandas as pd
    store, name, rows = sys.argv[1:4]
    client = mlflow.MlflowClient(store)
    experiments = [e.experiment_id for e in client.search_experiments()]
    (logged,) = [m for m in client.search_logged_models(experiments) if m.name == name]
    mlflow.set_tracking_uri(store)
    model = mlflow.pyfunc.load_model(logged.model_uri)
    predictions = model.predict(pd.read_parquet(rows))
    code = Path(mlflow.artifacts.download_artifacts(logged.model_uri)).resolve() / "code"
    files = {n: getattr(m, "__file__", None) for n, m in sys.modules.items() if n.split(".")[0] == "pipeline"}
    print(json.dumps({"predictions": [str(p) for p in predictions], "code": str(code), "modules": files}))
""")


def load_with_shipped_code(store_uri: str, name: str, rows: Path, cwd: Path) -> dict:
    """The logged model `name` of the store at `store_uri` loaded and predicting the rows of the parquet file
    `rows` in a fresh process that can import the engine only from the model's shipped code: its
    predictions, its `code` folder and each engine module's file."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT, store_uri, name, str(rows)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def outside_shipped_code(loaded: dict) -> list[str]:
    """The engine modules `load_with_shipped_code` imported from anywhere but the model's code folder."""
    code = Path(loaded["code"])
    return sorted(name for name, file in loaded["modules"].items()
                  if file is None or code not in Path(file).resolve().parents)
