"""The experiment's shared view in MLflow's UI: the JSON its runs page reads, and the links to it."""

import json

from pipeline.tracking import view


def test_the_view_sorts_by_the_main_metric_and_shows_it_with_the_swept_params():
    state = view.view_state("roc_auc", True, ["model", "seed"])
    # the keys and column ids of MLflow 3.17's runs page (its search facets and its UI state)
    assert state == {
        "orderByKey": "metrics.`val_roc_auc`", "orderByAsc": False,
        "selectedColumns": ["metrics.`val_roc_auc`", "metrics.`test_roc_auc`", "params.`model`",
                            "params.`seed`"],
    }
    assert view.view_state("rmse", False, ["model"])["orderByAsc"] is True  # smaller is better: ascending


def test_a_later_sweep_adds_its_swept_keys_and_keeps_the_earlier_ones():
    first = json.dumps(view.view_state("roc_auc", True, ["model", "seed"]))
    leaves = "model.lightgbm.params.num_leaves"
    later = view.merged(first, view.view_state("roc_auc", True, ["model", leaves]))
    assert later["selectedColumns"] == [
        "metrics.`val_roc_auc`", "metrics.`test_roc_auc`", "params.`model`",
        f"params.`{leaves}`", "params.`seed`"]
    replaced = view.merged("not json", view.view_state("roc_auc", True, []))
    assert replaced["selectedColumns"][0] == "metrics.`val_roc_auc`"


def test_the_link_opens_the_runs_tab_with_the_view():
    local = view.ui_base("sqlite:////tmp/outputs/mlflow.db", False, 5051)
    assert view.runs_link(local, "3") == \
        "http://127.0.0.1:5051/#/experiments/3/runs?viewStateShareKey=pipeline"
    server = view.ui_base("http://alice:secret@host:5000/", True, 5051)
    assert view.runs_link(server, "1") == \
        "http://alice:***@host:5000/#/experiments/1/runs?viewStateShareKey=pipeline"


class RacingClient:
    """A store where another job writes the view between this job's read and its write, once."""

    def __init__(self, other_view: str):
        self.tags: dict = {}
        self.other_view = other_view
        self.raced = False

    def get_experiment(self, experiment_id):
        return type("Experiment", (), {"tags": dict(self.tags)})()

    def set_experiment_tag(self, experiment_id, key, value):
        if not self.raced:
            self.raced = True
            self.tags[key] = self.other_view
            raise RuntimeError("UNIQUE constraint failed: experiment_tags.key, experiment_tags.experiment_id")
        self.tags[key] = value


def test_jobs_writing_the_view_at_once_keep_both_jobs_columns():
    other = json.dumps(view.view_state("roc_auc", True, ["model", "seed"]))
    client = RacingClient(other)
    view.share(client, "1", view.view_state("roc_auc", True, ["model", "model.lightgbm.params.num_leaves"]))
    stored = json.loads(client.tags[view.SHARED_VIEW_TAG + view.VIEW_KEY])
    assert "params.`seed`" in stored["selectedColumns"]
    assert "params.`model.lightgbm.params.num_leaves`" in stored["selectedColumns"]
