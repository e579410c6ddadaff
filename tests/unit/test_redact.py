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


SAS = "https://acct.blob.core.windows.net/c/f.csv?sv=2022-11-02&se=2030-01-01T00%3A00%3A00Z&sp=r&sig=SECRETSIG"
CONNECTION = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=SECRETKEY==;EndpointSuffix=core.windows.net"


@pytest.mark.parametrize("uri, expected", [
    (SAS, SAS.replace("SECRETSIG", "***")),
    ("https://maps.example.com/api?key=SECRET&q=x", "https://maps.example.com/api?key=***&q=x"),
    ("https://fn.azurewebsites.net/api/f?code=SECRET", "https://fn.azurewebsites.net/api/f?code=***"),
    ("https://h/x?password=SECRET&secret=SECRET", "https://h/x?password=***&secret=***"),
])
def test_secret_query_parameters_are_masked_and_the_rest_kept_byte_for_byte(uri, expected):
    assert redact_uri(uri) == expected


@pytest.mark.parametrize("override, expected", [
    (f"tracking.tags.x={SAS}", f"tracking.tags.x={SAS.replace('SECRETSIG', '***')}"),
    (f"data.path={SAS}", f"data.path={SAS.replace('SECRETSIG', '***')}"),
    ("+data.storage_options={token:SECRET}", "+data.storage_options={token:***}"),
    ("+data.storage_options={account_name: acct, anon: false}", "+data.storage_options={account_name: ***, anon: false}"),
    ("+data.storage_options.client_id=SECRET", "+data.storage_options.client_id=***"),
    ("+data.account_key=SECRET", "+data.account_key=***"),
    ("+data.options={account_key:SECRET,rows:10}", "+data.options={account_key:***,rows:10}"),
    ("+data.options={nested:{api_key:'SECRET, quoted'}}", "+data.options={nested:{api_key:'***'}}"),
    ("+data.options={conn:[a, {password: SECRET}]}", "+data.options={conn:[a, {password: ***}]}"),
    (f"+data.options.connection_string={CONNECTION}",
     f"+data.options.connection_string={CONNECTION.replace('SECRETKEY==', '***')}"),
    (f"+data.options={{conn:'{CONNECTION}'}}", f"+data.options={{conn:'{CONNECTION.replace('SECRETKEY==', '***')}'}}"),
    ("+db=Server=tcp:h,1433;User ID=u;Pwd=SECRET;", "+db=Server=tcp:h,1433;User ID=u;Pwd=***;"),
    ("+x=BlobEndpoint=https://a.blob.core.windows.net/;SharedAccessSignature=sv=2020&sig=SECRET",
     "+x=BlobEndpoint=https://a.blob.core.windows.net/;SharedAccessSignature=***&sig=***"),
    ("+tracking.tags.src=choice({token:SECRET},{b:c})", "+tracking.tags.src=choice({token:***},{b:c})"),
])
def test_secrets_in_override_values_are_masked(override, expected):
    assert redact_override(override) == expected
    assert "SECRET" not in redact_override(override)


@pytest.mark.parametrize("override", [
    "model=lightgbm,xgboost", "seed=range(1,3)", "+x='a, b'", "+x=${oc.env:HOME}", "tracking.uri=sqlite:////tmp/a b/m.db",
    "+data.options={rows:10, cols:[a,b], name:'x=1;y=2'}", "+model.lightgbm.params.key_words=[a,b]", "+x={", "+x=a\\,b",
    "+x={a:'unterminated", "data.storage_options.anon=false",
])
def test_overrides_without_secrets_come_back_byte_for_byte(override):
    assert redact_override(override) == override


def test_config_values_are_masked_by_the_same_rules():
    config = {"data": {"path": SAS, "storage_options": {"account_name": "acct", "anon": False, "retries": None},
                       "options": {"connection_string": CONNECTION, "account_key": "k"}},
              "tracking": {"tags": {"src": SAS, "team": "x"}}}
    assert redact(config) == {
        "data": {"path": SAS.replace("SECRETSIG", "***"),
                 "storage_options": {"account_name": "***", "anon": False, "retries": None},
                 "options": {"connection_string": CONNECTION.replace("SECRETKEY==", "***"), "account_key": "***"}},
        "tracking": {"tags": {"src": SAS.replace("SECRETSIG", "***"), "team": "x"}}}


def test_connection_strings_and_uris_inside_text_are_masked():
    text = f"cannot read {SAS} (conn {CONNECTION}) with lr=0.1"
    assert redact_text(text) == (f"cannot read {SAS.replace('SECRETSIG', '***')} "
                                 f"(conn {CONNECTION.replace('SECRETKEY==', '***')}) with lr=0.1")


@pytest.mark.parametrize("text, expected", [
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.SECRET", "Authorization: Bearer ***"),
    ("Basic dXNlcjpTRUNSRVQ=", "Basic ***"),
    ("token ghp_SECRET0123456789abcdefghijklmnopqrstu in a tag", "token *** in a tag"),
    ("github_pat_SECRET0123456789abcdefgh", "***"),
    ("glpat-SECRET0123456789abcd", "***"),
    ("xoxb-SECRET-0123456789", "***"),
    ("key id AKIAIOSFODNN7EXAMPLE", "key id ***"),
    ("sig=SECRET&se=2030-01-01&sp=r", "sig=***&se=2030-01-01&sp=r"),
    ('{"password": "SECRET", "user": "me"}', '{"password": "***", "user": "me"}'),
    ("{'api_key': 'SECRET'}", "{'api_key': '***'}"),
    ("train --password SECRET --epochs 3", "train --password *** --epochs 3"),
    ("train --api-key=SECRET", "train --api-key=***"),
    ("r-AccountKey=SECRET==", "r-AccountKey=***"),
])
def test_secrets_in_the_forms_people_paste_them_are_masked(text, expected):
    assert redact_text(text) == expected


@pytest.mark.parametrize("text", [
    "code=3", "key=value", "author=me --epochs 3", "Bearer of news", '{"user": "me"}', "ghp_short",
    "model=lightgbm num_leaves=31", "--password",
])
def test_text_without_those_forms_comes_back_unchanged(text):
    assert redact_text(text) == text


@pytest.mark.parametrize("uri", ["http://me:pa#SECRET@host:5000/x", "https://me:a?b#SECRET@host/p?token=SECRET"])
def test_a_password_with_an_unencoded_hash_or_question_mark_is_masked(uri):
    assert "SECRET" not in redact_uri(uri) and redact_uri(uri).startswith(uri.split(":")[0] + "://me:***@host")


def test_hydra_log_lines_pass_through_the_masking_filter():
    import logging

    from pipeline.redact import RedactingFilter

    record = logging.LogRecord("hydra", logging.INFO, __file__, 1, "\t#%d : %s", (0, "model=lightgbm "
                               "+data.storage_options={token:SECRET} +tracking.tags.x='Bearer abcdefghSECRET'"),
                               None)
    assert RedactingFilter().filter(record) is True
    assert record.getMessage() == ("\t#0 : model=lightgbm +data.storage_options={token:***} "
                                   "+tracking.tags.x='Bearer ***'")
