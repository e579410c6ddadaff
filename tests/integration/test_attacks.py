"""Attacks through the command line, each run as a user would type it: a `_target_` smuggled into a
value, a component target that walks attributes or leaves the allowed modules, secrets in override
values, a dangerous Hydra callback, a pickle planted where the engine reads its own. Each must be refused
before it has any effect, or logged masked."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.integration.mlflow_helpers import runs
from tests.unit.test_trusted import malicious, needs_root

SECRET = "S3cr3tV4lue"
SAS = f"https://acct.blob.core.windows.net/c/f.csv?sv=2022-11-02&sp=r&sig={SECRET}"
CONNECTION = (f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={SECRET}==;"
              "EndpointSuffix=core.windows.net")


def refused(proc, *phrases: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "dry run: plan written" not in proc.stdout
    for phrase in phrases:
        assert phrase in proc.stderr, proc.stderr


# ---- door 1: a _target_ inside a value is never built


def test_a_target_in_a_model_parameter_is_refused_and_not_run(cli, tmp_path):
    made = tmp_path / "made_by_params"
    proc = cli("model=lightgbm", f"model.lightgbm.params.learning_rate={{_target_:os.makedirs,name:{made}}}",
               "model.lightgbm.params.num_iterations=5", "data.max_rows=2000", "tracking=none")
    refused(proc, "model.lightgbm.params.learning_rate=", "holds a _target_", "model.<name>._target_")
    assert not made.exists()


@pytest.mark.parametrize("override, key", [
    ("model.lightgbm.params.learning_rate={_target_:os.makedirs,name:MADE}",
     "model.lightgbm.params.learning_rate"),
    ("+data.options.x={_target_:os.makedirs,name:MADE}", "data.options.x"),
    ("+hpo.options.x={_target_:os.makedirs,name:MADE}", "hpo.options.x"),
    ("+data.storage_options.fs=[1,{_target_:os.makedirs,name:MADE}]", "data.storage_options.fs[1]"),
])
def test_a_target_in_a_value_is_refused_by_the_dry_run(cli, tmp_path, override, key):
    made = tmp_path / "made"
    proc = cli("model=lightgbm", override.replace("MADE", str(made)), "dry_run=true", "tracking=none")
    refused(proc, f"{key}=", "holds a _target_")
    assert not made.exists()


# ---- door 4: a component target is a module plus one attribute, in whole allowed modules, of its kind


@pytest.mark.parametrize("overrides, phrases", [
    (["executor._target_=pipeline.store.shutil.copyfile"],
     ["executor._target_='pipeline.store.shutil.copyfile' cannot be imported"]),
    (["tracking._target_=pipeline.run.Path"],  # pipeline.run imports Path from pathlib
     ["tracking._target_='pipeline.run.Path' is defined in pathlib, outside the allowed modules"]),
    (["tracking._target_=pipeline.errors.ConfigError"],
     ["tracking._target_='pipeline.errors.ConfigError' is not a tracker", "pipeline.tracking.NullTracker"]),
    (["allowed_targets=[tests.user]", "executor._target_=tests.user_components.InlineBackend"],
     ["executor._target_='tests.user_components.InlineBackend' is outside the allowed modules"]),
])
def test_a_component_target_outside_its_rules_is_refused(cli, overrides, phrases):
    refused(cli("model=lightgbm", *overrides, "dry_run=true", "tracking=none"), *phrases)


# ---- door 5: secrets in override values stay out of MLflow


def test_secrets_in_override_values_are_masked_in_mlflow(cli, tmp_path):
    uri = f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"
    cli("-m", "model=lightgbm", "model.lightgbm.params.num_iterations=5", "data.max_rows=2000",
        "parallelism.num_folds=2", f"tracking.uri={uri}", f"+tracking.tags.src='{SAS}'",
        f"+tracking.tags.conn='{CONNECTION}'", f"+data.storage_options={{token:{SECRET},account_key:{SECRET}}}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}", check=True)
    _, all_runs = runs(tmp_path, uri=uri)
    assert len(all_runs) == 2  # the sweep's parent and its job
    for run in all_runs:
        logged = [run.info.run_name, *run.data.tags.values(), *run.data.params.values()]
        assert not [v for v in logged if SECRET in v]
    (job,) = [r for r in all_runs if "pipeline.run_dir" in r.data.tags]
    assert job.data.tags["src"] == SAS.replace(SECRET, "***")
    assert job.data.tags["conn"] == CONNECTION.replace(f"{SECRET}==", "***")
    assert "storage_options={token:***,account_key:***}" in job.info.run_name  # short, and masked
    assert "+data.storage_options={token:***,account_key:***}" in job.data.tags["pipeline.overrides"]
    assert job.data.params["data.storage_options.token"] == "***"
    store = [p for p in (tmp_path / "outputs").rglob("*") if p.is_file()]
    assert store and not [p for p in store if SECRET.encode() in p.read_bytes()]  # the database, artifacts


# ---- door 7: Hydra's own target policy refuses dangerous callbacks (hydra-core >= 1.3.6; the engine asks for 1.3.7)


@pytest.mark.parametrize("target, option", [
    ("os.system", "command='touch {victim}/made'"),  # would add a file
    ("shutil.rmtree", "path={victim}"),  # would delete the folder
])
def test_a_dangerous_hydra_callback_is_refused(cli, tmp_path, target, option):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "kept").touch()
    proc = cli(f"+hydra.callbacks.x._target_={target}", f"+hydra.callbacks.x.{option.format(victim=victim)}",
               "dry_run=true", "tracking=none")
    assert proc.returncode != 0 and f"Target '{target}' is blocklisted" in proc.stderr, proc.stderr
    assert "dry run: plan written" not in proc.stdout
    assert sorted(p.name for p in victim.iterdir()) == ["kept"]


# ---- door 8: what the engine unpickles from a run directory is read only if this user (or root) alone wrote it

RUN = ["model=lightgbm", "model.lightgbm.params.num_iterations=5", "data.max_rows=2000", "parallelism.num_folds=2",
       "parallelism.fit.num_cpus=1", "tracking=none"]  # two worker processes: the data goes through data/data.pkl


@pytest.fixture(scope="module")
def umask_0_run(tmp_path_factory) -> Path:
    """A finished run made under umask 0: Hydra makes its run directory 0777 then."""
    root = tmp_path_factory.mktemp("umask_0")
    old = os.umask(0)
    try:
        run_cli([*RUN, f"hydra.run.dir={root / 'run'}"], root, check=True)
    finally:
        os.umask(old)
    return root / "run"


def a_copy(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, symlinks=True)
    return copy


def test_what_a_run_writes_under_umask_0_no_one_else_may_write_and_a_rerun_reads_it(umask_0_run, tmp_path, cli):
    # Hydra's own (the folder, .hydra/ and its copies of the config, pipeline.log) are this user's alone
    assert stat.S_IMODE(umask_0_run.stat().st_mode) == 0o700
    hydra = [umask_0_run / ".hydra", *(umask_0_run / ".hydra").iterdir(), umask_0_run / "pipeline.log"]
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in hydra if p.stat().st_mode & 0o077} == {}
    engine = {p.relative_to(umask_0_run).as_posix(): stat.S_IMODE(p.stat().st_mode)
              for p in umask_0_run.rglob("*")}
    assert {"data", "data/data.pkl", "tasks", "predictors", "predictors/lightgbm.pkl", ".lock"} <= engine.keys()
    assert len([p for p in engine if p.startswith("tasks/")]) == 2
    assert {p: oct(mode) for p, mode in engine.items() if mode & 0o022} == {}
    proc = cli(*RUN, f"hydra.run.dir={a_copy(umask_0_run, tmp_path)}", check=True)
    assert "reused 2 of 2 fit(s)" in proc.stdout


def test_a_finished_fit_planted_as_a_symlink_is_refused_and_never_runs(umask_0_run, tmp_path, cli):
    run_dir, marker = a_copy(umask_0_run, tmp_path), tmp_path / "the_payload_ran"
    malicious(tmp_path / "evil.pkl", marker)
    planted = sorted((run_dir / "tasks").glob("*.pkl"))[0]
    planted.unlink()
    planted.symlink_to(tmp_path / "evil.pkl")
    refused(cli(*RUN, f"hydra.run.dir={run_dir}"), f"{planted} is a symbolic link")
    assert not marker.exists() and planted.is_symlink()  # refused, not fitted again over it


@needs_root
def test_a_data_file_of_another_user_is_refused_and_never_runs(umask_0_run, tmp_path, cli):
    run_dir, marker = a_copy(umask_0_run, tmp_path), tmp_path / "the_payload_ran"
    planted = run_dir / "data" / "data.pkl"
    malicious(planted, marker)
    os.chown(planted, 65534, 65534)
    refused(cli(*RUN, f"hydra.run.dir={run_dir}"), f"{planted} belongs to uid 65534")
    assert not marker.exists()


def test_a_predictor_others_may_write_is_refused_by_batch_prediction_and_never_runs(umask_0_run, tmp_path):
    run_dir, marker = a_copy(umask_0_run, tmp_path), tmp_path / "the_payload_ran"
    planted = run_dir / "predictors" / "lightgbm.pkl"
    malicious(planted, marker)
    planted.chmod(0o666)
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.predict", f"source={run_dir}", "data=parquet",
         f"data.path={ROOT / 'pipeline' / 'datasets' / 'adult.parquet'}", f"output={tmp_path / 'out.csv'}"],
        cwd=tmp_path, env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True, timeout=300)
    refused(proc, f"{planted} is writable by other users (mode 0666")
    assert not marker.exists() and not (tmp_path / "out.csv").exists()
