import pytest

from pipeline.redact import redact, redact_text, redact_uri


@pytest.mark.parametrize("uri", [
    "sqlite:////tmp/run/outputs/mlflow.db",
    "sqlite:///outputs/mlflow.db",
    "http://127.0.0.1:5000",
    "https://mlflow.example.com/path?experiment=3",
    "file:///tmp/mlruns",
    "s3://bucket/prefix",
])
def test_uris_without_secrets_come_back_unchanged(uri):
    assert redact_uri(uri) == uri


@pytest.mark.parametrize("uri, expected", [
    ("http://alice:hunter2@127.0.0.1:5000", "http://alice:***@127.0.0.1:5000"),
    ("https://token123@host/x", "https://***@host/x"),
    ("postgresql://u:p%40ss@db:5432/mlflow", "postgresql://u:***@db:5432/mlflow"),
    ("https://host/api?token=abc&experiment=3", "https://host/api?token=***&experiment=3"),
    ("https://u:pw@host/api?api_key=abc#frag", "https://u:***@host/api?api_key=***#frag"),
])
def test_credentials_are_masked(uri, expected):
    assert redact_uri(uri) == expected


def test_nested_config_values_under_secret_keys_are_masked():
    config = {"data": {"storage_options": {"token": "t", "anon": False}},
              "tracking": {"uri": "http://a:b@h:1", "tags": {"api_key": "k", "team": "x"}}}
    assert redact(config) == {"data": {"storage_options": {"token": "***", "anon": False}},
                              "tracking": {"uri": "http://a:***@h:1", "tags": {"api_key": "***", "team": "x"}}}


def test_uris_inside_text_are_masked():
    assert redact_text("see http://a:b@h:1/x and more") == "see http://a:***@h:1/x and more"
