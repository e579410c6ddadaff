import pytest

from pipeline.redact import is_secret_key, redact, redact_override, redact_text, redact_uri


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


@pytest.mark.parametrize("key", [
    "token", "api_token", "auth", "auth_token", "apiToken", "password", "db_password", "pg_password",
    "secret", "client_secret", "AWS_SECRET_ACCESS_KEY", "api_key", "api-key", "apikey", "apiKey", "private_key",
    "access_key", "credentials", "Authorization", "storage_options.token", "sas_key", "pwd",
])
def test_secret_keys_are_masked(key):
    assert is_secret_key(key)
    assert redact({key: "value"}) == {key: "***"}


@pytest.mark.parametrize("key", [
    "author", "authors", "tokenizer", "tokenizer_name", "tokenized", "keyword", "monkey", "key", "passing",
    "max_bin", "experiment", "run_name",
])
def test_ordinary_keys_are_not_masked(key):
    assert not is_secret_key(key)
    assert redact({key: "value"}) == {key: "value"}


def test_override_names_are_checked_by_whole_words():
    assert redact_override("+tracking.tags.author=alice") == "+tracking.tags.author=alice"
    assert redact_override("+tracking.tags.api_token=abc") == "+tracking.tags.api_token=***"
