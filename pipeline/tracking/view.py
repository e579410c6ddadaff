"""The experiment's shared view in MLflow's UI, and the links the console prints to it.

MLflow's UI keeps a runs list's columns and sort order in the browser, and a fresh browser shows no
metric column at all. An experiment tag `mlflow.sharedViewState.<key>` holding the view as JSON, opened
with `#/experiments/<id>/runs?viewStateShareKey=<key>`, is the UI's own way to hand a view over (its
"Share" button writes the same tag): the engine writes one per experiment, the main metric shown and
sorted best first, with the model kind and every key a sweep of it varied as columns. (The link
must name the `runs` tab: MLflow 3.17's `#/experiments/<id>?viewStateShareKey=…` lands on the GenAI
overview and drops the key.)
"""

from __future__ import annotations

import json
import time
from typing import Optional, Sequence

SHARED_VIEW_TAG = "mlflow.sharedViewState."  # MLflow's prefix of a shared view's experiment tag
VIEW_KEY = "pipeline"  # the experiment's one view: its tag and the link's viewStateShareKey
LOCAL_UI = "http://127.0.0.1"


def metric_column(name: str) -> str:
    return f"metrics.`{name}`"


def param_column(name: str) -> str:
    return f"params.`{name}`"


def view_state(metric: str, greater_is_better: bool, params: Sequence[str]) -> dict:
    """The runs list sorted by `val_<metric>`, best first, showing it, `test_<metric>` and `params`."""
    main = metric_column(f"val_{metric}")
    return {
        "orderByKey": main,
        "orderByAsc": not greater_is_better,
        "selectedColumns": [main, metric_column(f"test_{metric}"), *map(param_column, params)],
    }


def merged(stored: Optional[str], state: dict) -> dict:
    """`state` with the columns of the view stored before that it lacks (another sweep's swept keys),
    after its own; a stored view that is not JSON is replaced."""
    try:
        before = json.loads(stored) if stored else {}
    except ValueError:
        before = {}
    columns = list(state["selectedColumns"])
    old = before.get("selectedColumns") if isinstance(before, dict) else None
    columns += [c for c in (old if isinstance(old, list) else []) if isinstance(c, str) and c not in columns]
    return {**state, "selectedColumns": columns}


def ui_base(uri: str, remote: bool, port: int) -> str:
    """Where the UI of the store `uri` is (credentials masked): the server, or `mlflow ui` on `port`."""
    from pipeline.redact import redact_uri

    return redact_uri(uri).rstrip("/") if remote else f"{LOCAL_UI}:{port}"


def runs_link(base: str, experiment_id: str) -> str:
    return f"{base}/#/experiments/{experiment_id}/runs?viewStateShareKey={VIEW_KEY}"


def run_link(base: str, experiment_id: str, run_id: str) -> str:
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}"


def serve_command(uri: str, port: int) -> str:
    return f"mlflow ui --backend-store-uri {uri} --port {port}"


def share(client, experiment_id: str, state: dict, attempts: int = 5) -> None:
    """Write `state` as the experiment's shared view, keeping the columns it had that `state` lacks;
    unchanged, nothing is written. Jobs of a sweep write it at once: where another job's write wins
    the race (SQLite's unique key on the tag), the stored view is read again and merged again."""
    tag = SHARED_VIEW_TAG + VIEW_KEY
    for attempt in range(attempts):
        stored = client.get_experiment(experiment_id).tags.get(tag)
        view = json.dumps(merged(stored, state))
        if view == stored:
            return
        try:
            client.set_experiment_tag(experiment_id, tag, view)
            return
        except Exception:  # noqa: BLE001 - the store's own error type differs by backend
            if attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
