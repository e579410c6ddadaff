"""An override's key and value read as text: the one reading the settings, the start-up and the run names
share."""

import pytest

from pipeline.override_text import key_path, override_key, override_parts


@pytest.mark.parametrize("override, key, value", [
    ("model=gbm", "model", "gbm"),
    ("+model.catboost.params.depth=6", "model.catboost.params.depth", "6"),
    ("++hydra.mode=MULTIRUN", "hydra.mode", "MULTIRUN"),
    ("~model.nn", "model.nn", ""),
    ("~model.nn=null", "model.nn", "null"),
    ("data.path=s3://bucket/a=b.csv", "data.path", "s3://bucket/a=b.csv"),  # only the first '=' splits
])
def test_an_override_reads_as_its_key_without_prefixes_and_its_value(override, key, value):
    assert override_parts(override) == (key, value)
    assert override_key(override) == key
    assert key_path(override) == key.split(".")
