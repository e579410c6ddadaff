"""Attacks on a shared machine, each run through the command line as a user would type it: by another local
user (uid 65534, in a forked child that drops to it) or by whoever controls a file a run reads. Each must be
refused before it has any effect, contained, or masked. Most need no fit; those that read a trained run
share one (`trained`), made under umask 000."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.unit.test_trusted import NOBODY, malicious, needs_root

QUICK = ["model=lightgbm", "model.lightgbm.params.num_iterations=5", "data.max_rows=2000",
         "parallelism.num_folds=2"]
ADULT = ROOT / "pipeline" / "datasets" / "adult.parquet"
CACHE_REFUSED = ("the engine's private cache (library answers, learnt run tails, an empty MLflow store) "
                 "is not used")


def as_nobody(action, *args) -> None:
    """Run `action(*args)` in a forked child as uid/gid 65534: another local user."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            action(*args)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"{action.__name__} failed as uid {NOBODY}"


def traversable(path: Path) -> None:
    """Let other users pass through `path` and the folders above it (pytest's are 0700), as through
    /home/<user> on a shared machine: they may not list or write into them."""
    for folder in (path, *path.parents):
        folder.chmod(stat.S_IMODE(folder.stat().st_mode) | 0o011)


def sticky_shared(tmp_path: Path) -> Path:
    """A folder every user may write into, as /tmp: no one may remove another's files there."""
    traversable(tmp_path)
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


def refused(proc, *phrases: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    for phrase in phrases:
        assert phrase in proc.stderr, proc.stderr


def predict(source: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.predict", f"source={source}", "data=parquet", f"data.path={ADULT}",
         f"output={tmp_path / 'out.csv'}", *extra],
        cwd=tmp_path, env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True, timeout=300)


SECRET = "S3cr3tV4lue"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SECRETS_GIVEN = [  # a run name and tag values holding credentials in the forms people paste them
    f"tracking.run_name='r-AccountKey={SECRET}=='",
    f"+tracking.tags.header='Authorization: Bearer {SECRET}xyz'",
    f"+tracking.tags.github='ghp_{SECRET}{'a' * 26}'",
    f"+tracking.tags.gitlab='glpat-{SECRET}{'b' * 10}'",
    f"+tracking.tags.slack='xoxb-{SECRET}-123'",
    f"+tracking.tags.aws='{KEY_ID}'",
    f"+tracking.tags.sas='sig={SECRET}&se=2030-01-01'",
    f"+tracking.tags.json='{{\"password\": \"{SECRET}\"}}'",
    f"+tracking.tags.cmd='train --password {SECRET} --epochs 3'",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished run logged to a SQLite store, made under umask 000, its run name and tags holding
    secrets; its run id, store and folders."""
    root = tmp_path_factory.mktemp("trained")
    old = os.umask(0)
    try:
        proc = run_cli([*QUICK, *SECRETS_GIVEN, f"hydra.run.dir={root / 'run'}"], root, check=True)
    finally:
        os.umask(old)
    run_id = proc.stdout.split("MLflow run ")[1].split(":")[0]
    return {"root": root, "run_id": run_id, "db": root / "outputs" / "mlflow.db", "run": root / "run"}


def copy_store(trained, folder: Path) -> Path:
    """A copy of the trained run's database in `folder` (its artifacts stay where they are)."""
    db = folder / "copy.db"
    shutil.copy(trained["db"], db)
    return db


def set_tag(db: Path, key: str, value: str) -> None:
    with sqlite3.connect(db) as con:
        con.execute("update tags set value=? where key=?", (value, key))


def model_folder(trained) -> Path:
    (folder,) = (trained["root"] / "outputs" / "mlartifacts" / "models").iterdir()
    return folder / "artifacts"


# ---- 1. stores are trusted like pickles


@needs_root
def test_a_store_another_user_made_first_is_refused(cli, tmp_path):
    shared = sticky_shared(tmp_path)
    db = shared / "shared.db"

    def plant():
        db.touch()
        db.chmod(0o666)

    as_nobody(plant)
    proc = cli(*QUICK, f"tracking.uri=sqlite:///{db}", f"hydra.run.dir={tmp_path / 'run'}")
    refused(proc, f"{db} (the MLflow store) belongs to uid {NOBODY}")
    assert db.stat().st_size == 0 and not (tmp_path / "run" / "predictors").exists()


def test_a_file_store_others_may_write_is_refused(cli, tmp_path):
    store = tmp_path / "mlruns"
    store.mkdir()
    store.chmod(0o777)
    proc = cli(*QUICK, f"tracking.uri={store.as_uri()}", f"hydra.run.dir={tmp_path / 'run'}")
    refused(proc, f"{store} (the MLflow store) is writable by other users (mode 0777)")
    assert list(store.iterdir()) == []


@needs_root
def test_a_run_id_in_a_store_of_another_user_never_runs_its_payload(trained, tmp_path):
    shared, marker = sticky_shared(tmp_path), tmp_path / "the_payload_ran"
    db = copy_store(trained, shared)
    evil = tmp_path / "evil"
    shutil.copytree(model_folder(trained), evil)
    malicious(evil / "artifacts" / "predictor.pkl", marker)
    set_tag(db, "best/model_uri", str(evil))
    os.chown(db, NOBODY, NOBODY)
    refused(predict(trained["run_id"], tmp_path, f"tracking.uri=sqlite:///{db}"),
            f"{db} (the MLflow store) belongs to uid {NOBODY}")
    assert not marker.exists()


def test_a_best_model_uri_pointing_outside_the_store_is_not_followed(trained, tmp_path):
    marker = tmp_path / "the_payload_ran"
    db = copy_store(trained, tmp_path)
    evil = tmp_path / "evil"
    shutil.copytree(model_folder(trained), evil)
    malicious(evil / "artifacts" / "predictor.pkl", marker)
    set_tag(db, "best/model_uri", str(evil))
    refused(predict(trained["run_id"], tmp_path, f"tracking.uri=sqlite:///{db}"),
            f"the run's best/model_uri tag is '{evil}', not a runs:/ or models:/ URI")
    assert not marker.exists()


@needs_root
def test_a_logged_model_another_user_can_change_is_refused_and_never_runs(trained, tmp_path):
    """The store is the user's, the model folder it names another user's (or writable by others)."""
    marker = tmp_path / "the_payload_ran"
    db = copy_store(trained, tmp_path)
    evil = tmp_path / "evil"
    shutil.copytree(model_folder(trained), evil)
    malicious(evil / "artifacts" / "predictor.pkl", marker)
    with sqlite3.connect(db) as con:
        con.execute("update logged_models set artifact_location=?", (evil.as_uri(),))
    os.chown(evil / "artifacts" / "predictor.pkl", NOBODY, NOBODY)
    refused(predict(trained["run_id"], tmp_path, f"tracking.uri=sqlite:///{db}"),
            f"{evil / 'artifacts' / 'predictor.pkl'} (the MLflow model models:/", f"belongs to uid {NOBODY}")
    os.chown(evil / "artifacts" / "predictor.pkl", 0, 0)
    (evil / "mlflow_model.py").chmod(0o666)  # the model's code, which loading runs
    refused(predict(trained["run_id"], tmp_path, f"tracking.uri=sqlite:///{db}"),
            f"{evil / 'mlflow_model.py'} (the MLflow model", "is writable by other users (mode 0666)")
    assert not marker.exists()


def test_the_pyfunc_model_reads_its_pickle_through_the_trusted_opener(tmp_path):
    from types import SimpleNamespace

    from pipeline.tracking.mlflow_model import PipelinePredictor
    from pipeline.trusted import UntrustedFile

    marker, planted = tmp_path / "the_payload_ran", tmp_path / "predictor.pkl"
    malicious(planted, marker)
    planted.chmod(0o666)
    with pytest.raises(UntrustedFile, match="is writable by other users"):
        PipelinePredictor().load_context(SimpleNamespace(artifacts={"predictor": str(planted)}))
    assert not marker.exists()


@needs_root
def test_a_lock_file_planted_as_a_symlink_empties_nothing(cli, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("kept")
    shared = sticky_shared(tmp_path)
    db = shared / "shared.db"
    as_nobody(os.symlink, victim, shared / "shared.db.lock")
    proc = cli(*QUICK, f"tracking.uri=sqlite:///{db}", f"hydra.run.dir={tmp_path / 'run'}")
    refused(proc, f"{shared / 'shared.db.lock'} (a file of the MLflow store) is a symbolic link")
    assert victim.read_text() == "kept"


def test_the_store_lock_never_follows_nor_truncates(tmp_path):
    from pipeline.tracking.store import _open_marker

    victim = tmp_path / "victim.txt"
    victim.write_text("kept")
    (tmp_path / "x.lock").symlink_to(victim)
    with pytest.raises(OSError):
        _open_marker(tmp_path / "x.lock")
    (tmp_path / "y.lock").write_text("held")
    os.close(_open_marker(tmp_path / "y.lock"))
    assert victim.read_text() == "kept" and (tmp_path / "y.lock").read_text() == "held"


# ---- 2. whatever the umask, nothing is open to others' writes; Hydra's files are this user's alone


def test_a_run_under_umask_000_leaves_nothing_others_may_write(trained, tmp_path):
    made = [p for p in trained["root"].rglob("*") if not p.is_symlink()]
    assert {str(p) for p in made if p.name == "predictor.pkl"}  # the logged model is among them
    assert {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in made if p.stat().st_mode & 0o022} == {}
    hydra = [trained["run"] / ".hydra", *(trained["run"] / ".hydra").iterdir()]
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in hydra if p.stat().st_mode & 0o077} == {}


def test_a_predictor_made_writable_is_refused_by_prediction_by_run_id(trained, tmp_path):
    pickle_file = model_folder(trained) / "artifacts" / "predictor.pkl"
    pickle_file.chmod(0o666)
    try:
        proc = predict(trained["run_id"], tmp_path, f"tracking.uri=sqlite:///{trained['db']}")
    finally:
        pickle_file.chmod(0o644)
    refused(proc, f"{pickle_file} (the MLflow model models:/", "is writable by other users (mode 0666)")
    assert not (tmp_path / "out.csv").exists()
    predict(trained["run_id"], tmp_path, f"tracking.uri=sqlite:///{trained['db']}").check_returncode()


def test_a_sweep_writes_multirun_yaml_for_this_user_alone(cli, tmp_path):
    old = os.umask(0)
    try:
        cli("-m", "model=lightgbm", "dry_run=true", "tracking=none", f"hydra.sweep.dir={tmp_path / 'sweep'}",
            check=True)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "sweep" / "multirun.yaml").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "sweep" / "0" / ".hydra" / "config.yaml").stat().st_mode) == 0o600


# ---- 3. run folders and resume sources are checked before use


def victim_folder(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    (victim / ".hydra").mkdir(parents=True)
    (victim / "config.yaml").write_text("mine")
    (victim / ".hydra" / "config.yaml").write_text("mine")
    return victim


@pytest.mark.parametrize("link", ["", ".hydra", "predictors"])
def test_a_run_folder_or_its_folders_as_a_symlink_is_refused_before_anything_is_written(cli, tmp_path, link):
    victim, run = victim_folder(tmp_path), tmp_path / "run"
    if link:
        run.mkdir()
        (run / link).symlink_to(victim)
    else:
        run.symlink_to(victim)
    proc = cli("model=lightgbm", "dry_run=true", "tracking=none", f"hydra.run.dir={run}")
    refused(proc, f"hydra.run.dir={run}: {run / link if link else run} (", "is a symbolic link")
    assert sorted(p.name for p in victim.rglob("*")) == [".hydra", "config.yaml", "config.yaml"]
    assert (victim / "config.yaml").read_text() == "mine" == (victim / ".hydra" / "config.yaml").read_text()


@needs_root
def test_a_run_folder_of_another_user_is_refused_before_anything_is_written(cli, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.chown(run, NOBODY, NOBODY)
    proc = cli("model=lightgbm", "dry_run=true", "tracking=none", f"hydra.run.dir={run}")
    refused(proc, f"hydra.run.dir={run}: {run} (the run folder) belongs to uid {NOBODY}")
    assert list(run.iterdir()) == []


@needs_root
def test_a_run_folder_inside_a_folder_of_another_user_is_refused(cli, tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    proc = cli("model=lightgbm", "dry_run=true", "tracking=none", f"hydra.run.dir={theirs / 'run'}")
    refused(proc, f"{theirs}, a folder above it, belongs to uid {NOBODY}")
    assert list(theirs.iterdir()) == []


def resume_source(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    for name in ("tasks", "trials", "checkpoints"):
        (source / name).mkdir(parents=True)
    return source


@needs_root
def test_a_resume_source_of_another_user_is_refused(cli, tmp_path):
    source = resume_source(tmp_path)
    for path in (source, *source.iterdir()):
        os.chown(path, NOBODY, NOBODY)
    proc = cli(*QUICK, "tracking=none", f"resume={source}", f"hydra.run.dir={tmp_path / 'run'}")
    refused(proc, f"resume='{source}': {source} (a run folder to resume from) belongs to uid {NOBODY}")


def test_a_checkpoint_linked_to_a_private_folder_is_not_copied(tmp_path):
    from pipeline.store import ResultStore
    from pipeline.trusted import UntrustedFile

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "secret").write_text("root only")
    (private / "secret").chmod(0o600)
    source = resume_source(tmp_path)
    (source / "checkpoints" / "k1").symlink_to(private)
    store = ResultStore(tmp_path / "run", [source])
    with pytest.raises(UntrustedFile, match="is a symbolic link"):
        store.checkpoint_dir("k1")
    assert not (tmp_path / "run" / "checkpoints" / "k1").exists()


def test_a_copied_checkpoint_keeps_its_narrow_modes(tmp_path):
    from pipeline.store import ResultStore

    source = resume_source(tmp_path)
    folder = source / "checkpoints" / "k1"
    folder.mkdir(mode=0o700)
    (folder / "state.pt").write_text("weights")
    (folder / "state.pt").chmod(0o600)
    copied = ResultStore(tmp_path / "run", [source]).checkpoint_dir("k1")
    assert stat.S_IMODE(copied.stat().st_mode) == 0o700
    assert stat.S_IMODE((copied / "state.pt").stat().st_mode) == 0o600


def test_a_fifo_among_a_resume_sources_trials_is_refused_at_once(cli, tmp_path):
    source = resume_source(tmp_path)
    os.mkfifo(source / "trials" / "lightgbm.json")
    proc = cli(*QUICK, "tracking=none", f"resume={source}", f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    refused(proc, f"{source / 'trials' / 'lightgbm.json'} is not a regular file")


def test_prior_parameters_outside_the_search_space_are_dropped_with_a_warning(cli, tmp_path):
    source = resume_source(tmp_path)
    (source / "trials" / "lightgbm.json").write_text('{"0": {"learning_rate": 7.5, "num_leaves": 31}}')
    proc = cli(*QUICK, "tracking=none", "hpo=random", "hpo.num_trials=1", f"resume={source}",
               f"hydra.run.dir={tmp_path / 'run'}", check=True)
    assert "the recorded learning_rate=7.5 is outside the search space (0.01 to 0.2); dropped" in proc.stdout
    import json

    (used,) = json.loads((tmp_path / "run" / "trials" / "lightgbm.json").read_text()).values()
    assert 0.01 <= used["learning_rate"] <= 0.2 and used["num_leaves"] == 31


# ---- 4. names are names


def test_a_model_named_as_a_path_is_refused_naming_the_key(cli, tmp_path):
    from tests.conftest import user_config

    search = user_config(tmp_path, "model", "evil", "defaults:\n  - lightgbm\n  - _self_\n"
                         "'../../../../elsewhere/evil': ${.lightgbm}\n")
    proc = cli("model=evil", search, *QUICK[1:], "tracking=none",
               f"hydra.run.dir={tmp_path / 'a' / 'b' / 'run'}")
    refused(proc, "model.../../../../elsewhere/evil: '../../../../elsewhere/evil' is not a name")
    assert not (tmp_path / "elsewhere").exists()


def test_a_predictor_named_as_a_path_is_refused(tmp_path):
    proc = predict(str(tmp_path), tmp_path, "predictor=../../evil")
    refused(proc, "predictor: '../../evil' is not a name")


# ---- 8. an executor or tracker target must return what the key takes


@pytest.mark.parametrize("override, phrase", [
    ("executor._target_=pipeline.store.write_state",
     "executor._target_='pipeline.store.write_state' is a function that returns NoneType, not an executor"),
    ("tracking._target_=pipeline.store.read_state",
     "tracking._target_='pipeline.store.read_state' is a function that returns Optional"),
    ("executor._target_=pipeline.trusted.make_folders",
     "executor._target_='pipeline.trusted.make_folders' is a function that returns NoneType"),
])
def test_a_function_that_returns_no_component_is_refused_before_it_is_called(cli, tmp_path, override, phrase):
    proc = cli("model=lightgbm", override, "dry_run=true", "tracking=none",
               f"hydra.run.dir={tmp_path / 'run'}")
    refused(proc, phrase)
    assert not (tmp_path / "run" / "run_state.json").exists()


# ---- 5. the cache of library answers is this user's alone


@needs_root
def test_a_doctored_answer_in_a_shared_cache_never_lets_a_misspelt_parameter_pass(tmp_path, monkeypatch,
                                                                                    caplog):
    import json

    from pipeline.errors import ConfigError
    from pipeline.models import native
    from pipeline.models.xgboost import XGBoostModel

    cache = sticky_shared(tmp_path) / "cache"
    as_nobody(lambda: (cache / "xgboost-params").mkdir(mode=0o777, parents=True))
    monkeypatch.setenv("PIPELINE_CACHE_DIR", str(cache))
    asked, real = [], native._xgboost_configure
    monkeypatch.setattr(native, "_xgboost_configure", lambda p, n: asked.append((p, n)) or real(p, n))
    with pytest.raises(ConfigError, match="max_dept is not an XGBoost parameter"):
        XGBoostModel.check_params("xgboost", {"max_dept": 3}, "binary")
    (params, num_feature), = asked
    config, said = real(params, num_feature)
    assert [s for s in said if "max_dept" in s]  # XGBoost's own warning, which the check turns into an error
    entry = cache / "xgboost-params" / Path(native._cache_entry(params, num_feature)).name

    def plant():
        entry.unlink(missing_ok=True)  # the folder is the attacker's: whatever is in it they may replace
        entry.write_text(json.dumps({"config": config, "said": []}))  # the warning taken out
        entry.chmod(0o666)

    as_nobody(plant)
    with pytest.raises(ConfigError, match="max_dept is not an XGBoost parameter"):
        XGBoostModel.check_params("xgboost", {"max_dept": 3}, "binary")
    assert CACHE_REFUSED in caplog.text
    assert str(cache) in caplog.text


@needs_root
def test_tail_measures_planted_by_another_user_do_not_shrink_the_reserve(tmp_path, monkeypatch, caplog):
    """The tail's learnt reserve (pipeline.graph.tail) reads the same private cache: a share another user wrote
    (a near-zero tail, so that runs overrun their time_limit_s) is not read: no tail counts as measured."""
    import json

    from pipeline.graph.tail import RECORD, TailEstimate, reserved_share

    cache = sticky_shared(tmp_path) / "cache"
    tail = TailEstimate((("lightgbm", 5, 1),), 2, size="1e4")
    as_nobody(lambda: (cache / "tail").mkdir(mode=0o777, parents=True))

    def plant():
        entry = cache / "tail" / tail.cache_name
        entry.write_text(json.dumps({RECORD: [0.0]}))
        entry.chmod(0o666)

    as_nobody(plant)
    monkeypatch.setenv("PIPELINE_CACHE_DIR", str(cache))
    assert reserved_share(tail, 0.25) == (1.0, 0)
    assert CACHE_REFUSED in caplog.text


def test_the_cache_is_made_for_this_user_alone(tmp_path, monkeypatch):
    from pipeline import private_cache

    monkeypatch.setenv("PIPELINE_CACHE_DIR", str(tmp_path / "cache"))
    private_cache.keep_json("xgboost-params", "a.json", {"config": {}})
    assert private_cache.read_json("xgboost-params", "a.json") == {"config": {}}
    folders = (tmp_path / "cache", tmp_path / "cache" / "xgboost-params")
    modes = [stat.S_IMODE(p.stat().st_mode) for p in folders]
    assert modes == [0o700, 0o700]
    assert stat.S_IMODE((tmp_path / "cache" / "xgboost-params" / "a.json").stat().st_mode) == 0o600


# ---- 6. secrets stay out of MLflow, the run's logs and (readable) files


def test_secrets_in_the_run_name_and_tag_values_never_reach_the_store(trained):
    from tests.integration.mlflow_helpers import runs

    _, (run,) = runs(trained["root"], uri=f"sqlite:///{trained['db']}")
    logged = [run.info.run_name, *run.data.tags.values(), *run.data.params.values()]
    assert [v for v in logged if SECRET in v or KEY_ID in v] == []
    assert run.info.run_name == "r-AccountKey=***"
    assert run.data.tags["header"] == "Authorization: Bearer ***"
    assert run.data.tags["sas"] == "sig=***&se=2030-01-01"
    assert run.data.tags["json"] == '{"password": "***"}'
    assert run.data.tags["cmd"] == "train --password *** --epochs 3"
    stored = [p for p in (trained["root"] / "outputs").rglob("*") if p.is_file()]
    assert stored and [p for p in stored if SECRET.encode() in p.read_bytes()] == []
    run_files = [p for p in trained["run"].rglob("*") if p.is_file()]
    readable = [p for p in run_files if ".hydra" not in p.parts]  # .hydra/ is 0600: Hydra's copy as typed
    assert [p for p in readable if SECRET.encode() in p.read_bytes()] == []


def test_hydras_launcher_prints_each_jobs_overrides_masked(cli, tmp_path):
    proc = cli("-m", "model=lightgbm", "dry_run=true", "tracking=none", *SECRETS_GIVEN[1:],
               f"+data.storage_options={{token:{SECRET}}}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
               check=True)
    assert "#0 : model=lightgbm" in proc.stdout and "+data.storage_options={token:***}" in proc.stdout
    assert SECRET not in proc.stdout + proc.stderr and KEY_ID not in proc.stdout
    hydra_files = [tmp_path / "sweep" / "multirun.yaml", *(tmp_path / "sweep" / "0" / ".hydra").iterdir()]
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in hydra_files
            if p.stat().st_mode & 0o077} == {}


def test_a_password_with_an_unencoded_hash_is_masked_in_the_error(cli, tmp_path):
    proc = cli(*QUICK, f"tracking.uri='http://me:pa#{SECRET}@127.0.0.1:9'", "tracking.timeout_s=2",
               f"hydra.run.dir={tmp_path / 'run'}")
    refused(proc, "tracking.uri=http://me:***@127.0.0.1:9")
    assert SECRET not in proc.stdout + proc.stderr


# ---- 7. data.max_rows bounds what is read; running out of memory is a data error


@pytest.fixture(scope="module")
def tall_parquet(tmp_path_factory) -> Path:
    """A few MB on disk, 40M rows in 40 row groups: its label column alone is 320 MB once decoded."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path, rows = tmp_path_factory.mktemp("tall") / "tall.parquet", 1_000_000
    group = pa.table({"x": np.zeros(rows, dtype=np.int64), "label": np.repeat(np.array([0, 1]), rows // 2)})
    with pq.ParquetWriter(path, group.schema) as writer:
        for _ in range(40):
            writer.write_table(group, row_group_size=rows)
    return path


def test_max_rows_bounds_what_a_tall_parquet_file_costs(tall_parquet, tmp_path):
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "peak %M KB", sys.executable, "-m", "pipeline", "model=lightgbm",
         "data=parquet", f"data.path={tall_parquet}", "data.label=label", "data.max_rows=2000",
         "dry_run=true", "tracking=none", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    peak_mb = int(proc.stderr.rsplit("peak ", 1)[1].split()[0]) / 1024
    assert peak_mb < 500, f"{peak_mb:.0f} MB at the peak"  # about 200 MB, as for a small file (1.1 GB before)


def test_max_rows_reads_only_the_row_groups_it_needs(tall_parquet):
    from pipeline.table_files import label_column, read_file

    label = label_column(tall_parquet, "parquet", "label", "data.path", max_rows=2000, seed=1)
    assert len(label) == 1_000_000  # one row group of the 40
    assert len(read_file(tall_parquet, "data.path", "parquet", max_rows=1_500_000, seed=1)) == 2_000_000


@pytest.fixture(scope="module")
def long_csv(tmp_path_factory) -> Path:
    """4M short rows, about 80 MB on disk: pandas holds about 300 MB more once it has read it whole."""
    import numpy as np

    path, block = tmp_path_factory.mktemp("long") / "long.csv", 500_000
    colours = np.array(["red", "green", "blue"])
    with path.open("w") as fh:
        fh.write("row,x,colour,label\n")
        for start in range(0, 4_000_000, block):
            i = np.arange(start, start + block)
            x = np.round(np.random.default_rng(start + 1).random(block), 3)
            fh.write("".join(f"{a},{b},{c},{d}\n" for a, b, c, d in
                             zip(i.tolist(), x.tolist(), colours[i % 3].tolist(), (i % 2).tolist())))
    return path


def _load_peak_mb(path: Path, cwd: Path) -> float:
    """The peak RSS of a process that loads `path` as a run does, with data.max_rows=2000."""
    load = ("import sys; from pathlib import Path; from pipeline.config import DataConf; "
            "from pipeline.data import load; data = load(DataConf(name='csv', _target_='pipeline.data_sources."
            "CsvSource', path=sys.argv[1], label='label', max_rows=2000), Path.cwd()); "
            "assert len(data.X) == 2000, len(data.X)")
    proc = subprocess.run(["/usr/bin/time", "-f", "peak %M KB", sys.executable, "-c", load, str(path)],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stderr.rsplit("peak ", 1)[1].split()[0]) / 1024


def test_max_rows_bounds_what_a_long_csv_file_costs(long_csv, tmp_path):
    head = tmp_path / "head.csv"
    with long_csv.open() as fh, head.open("w") as out:
        out.writelines(line for _, line in zip(range(10_001), fh))
    extra_mb = _load_peak_mb(long_csv, tmp_path) - _load_peak_mb(head, tmp_path)
    assert extra_mb < 150, f"{extra_mb:.0f} MB more than for its first 10,000 rows"  # about 65 (300 before)


def test_memory_running_out_while_reading_is_a_data_error_naming_the_file(tall_parquet, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.table_files import label_column
    from pipeline.errors import DataError

    def out_of_memory(*args, **kwargs):
        raise pa.ArrowMemoryError("malloc of size 3200000000 failed")

    monkeypatch.setattr(pq.ParquetFile, "read", out_of_memory)
    with pytest.raises(DataError, match=f"data.path='{tall_parquet}' cannot be read: memory ran out"):
        label_column(tall_parquet, "parquet", "label", "data.path")
