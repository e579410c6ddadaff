"""Screenshots of the real MLflow UI for docs/mlflow.md, taken by headless Chromium.

Runs a small sweep into a scratch directory, serves its store with `mlflow server` on
127.0.0.1, and photographs the experiment page and the compare view of the sweep's jobs:

    python docs/scripts/mlflow_screenshots.py          # needs Debian's chromium (apt-get install chromium)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMG = ROOT / "docs" / "img"
SWEEP = ["-m", "model=lightgbm,xgboost,nn", "seed=0,1", "data.max_rows=4000"]
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer")


def screenshot(url: str, out: Path, size: str = "1600,1000", budget_ms: int = 20000) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed: apt-get install chromium")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={size}",
             f"--virtual-time-budget={budget_ms}", f"--screenshot={out}", url],
            check=True, capture_output=True, timeout=120,
        )
    print(f"wrote {out}")


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="mlflow-docs-"))
    if os.environ.get("MLFLOW_DOCS_WORKDIR"):  # reuse an earlier sweep
        work = Path(os.environ["MLFLOW_DOCS_WORKDIR"])
    else:
        subprocess.run([sys.executable, "-m", "pipeline", *SWEEP], cwd=work, check=True)
    store = f"sqlite:///{work / 'outputs' / 'mlflow.db'}"
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", store, "--default-artifact-root", str(work / "outputs" / "mlartifacts")],
        cwd=work, env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(base + "/health")
        import mlflow

        client = mlflow.MlflowClient(store)
        experiment = client.get_experiment_by_name("pipeline")
        runs = client.search_runs([experiment.experiment_id])
        jobs = [r.info.run_id for r in runs if "pipeline.run_dir" in r.data.tags]
        IMG.mkdir(parents=True, exist_ok=True)
        assert experiment.tags.get("mlflow.experimentKind") == "custom_model_development"
        screenshot(f"{base}/#/experiments/{experiment.experiment_id}/runs", IMG / "mlflow_experiment.png")
        query = urllib.parse.urlencode(
            {"runs": json.dumps(jobs), "experiments": json.dumps([experiment.experiment_id])}
        )
        screenshot(f"{base}/#/compare-runs?{query}", IMG / "mlflow_compare.png", size="1600,1400")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(20)
        if not os.environ.get("MLFLOW_DOCS_WORKDIR"):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
