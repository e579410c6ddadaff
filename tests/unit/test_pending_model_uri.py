"""A logged model's URI is not waited for: later calls carry a PendingModelUri that the tracker's
process replaces with the URI it logged."""

from pipeline.tracking.protocol import PendingModelUri, resolve_pending as _resolve


def test_a_pending_uri_becomes_the_logged_one_wherever_a_call_carries_it():
    uris = {"lightgbm": "models:/m-1", "ensemble": "models:/m-2"}
    args = (PendingModelUri("ensemble"), "registry-name", "champion")
    assert _resolve(args, uris) == ("models:/m-2", "registry-name", "champion")
    tags = {"best/model_uri": PendingModelUri("lightgbm"), "best/model": "lightgbm"}
    assert _resolve((tags,), uris) == ({"best/model_uri": "models:/m-1", "best/model": "lightgbm"},)


def test_a_model_that_was_not_logged_leaves_its_tag_out_and_nothing_else():
    uris = {"lightgbm": None}  # logging it failed; the run's failure says why
    tags = {"best/model_uri": PendingModelUri("lightgbm"), "best/model": "lightgbm", "note": None}
    assert _resolve(tags, uris) == {"best/model": "lightgbm", "note": None}
    assert _resolve((PendingModelUri("lightgbm"), "name"), uris) == (None, "name")
