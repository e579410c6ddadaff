"""The bad-input corpus: each case is refused before any work, with one clear message that names the
key or column, a non-zero exit, no traceback, and no MLflow run left RUNNING.

Cases run the real entry point (`pipeline.__main__.main`, Hydra included) in-process for speed;
tests/integration/test_cli.py runs a handful of them as real subprocesses.
"""

from __future__ import annotations

import socket
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT, free_port

ADULT = ROOT / "pipeline" / "datasets" / "adult.parquet"


def write_tables(folder: Path) -> None:
    """Small CSV files, each broken in one way."""
    base = pd.read_parquet(ADULT).head(400)
    base.to_csv(folder / "good.csv", index=False)
    (folder / "empty.csv").write_text("")
    (folder / "header_only.csv").write_text("a,b,y\n")
    constant = base.copy()
    constant["income"] = "<=50K"
    constant.to_csv(folder / "constant.csv", index=False)
    constant["income"] = 2
    constant.to_csv(folder / "constant_number.csv", index=False)
    nan_label = base.copy()
    nan_label["income"] = np.nan
    nan_label.to_csv(folder / "nan_label.csv", index=False)
    dirty = base.copy()
    dirty["age"] = dirty["age"].astype(object)
    dirty.loc[7, "age"] = "forty"
    dirty.to_csv(folder / "text_in_numbers.csv", index=False)
    text = base.to_csv(index=False).splitlines()
    text[0] = text[0].replace("fnlwgt", "age")
    (folder / "duplicate_columns.csv").write_text("\n".join(text) + "\n")
    test = base.head(50).copy()
    test.loc[test.index[:3], "workclass"] = "Astronaut"
    test.to_csv(folder / "unseen_test.csv", index=False)
    three = base.copy()
    three["income"] = np.arange(len(three)) % 3
    three.to_csv(folder / "three_classes.csv", index=False)


CSV = ["data=csv", "data.label=income"]

CASES = [
    # ---- config: Hydra's composition against the typed schemas
    ("misspelt top-level key", ["seeed=1"], ["seeed"]),
    ("misspelt nested key", ["parallelism.num_fold=3"], ["num_fold"]),
    ("misspelt key in an appended profile", ["+hardware=4gpu", "hardware.num_cpu=8"], ["num_cpu"]),
    ("wrong type: int", ["parallelism.num_folds=five"], ["parallelism.num_folds", "five"]),
    ("wrong type: int given a float", ["hpo.num_trials=1.5"], ["hpo.num_trials", "1.5"]),
    ("wrong type: bool", ["dry_run=maybe"], ["dry_run", "maybe"]),
    ("unknown model option", ["model=no_such_kind"], ["model/no_such_kind", "lightgbm", "nn_gpu"]),
    ("unknown hpo option", ["hpo=bayes"], ["hpo/bayes", "tpe", "random"]),
    ("unknown hardware profile", ["+hardware=3gpu"], ["hardware/3gpu", "4gpu"]),
    ("hardware without the +", ["hardware=4gpu"], ["+hardware=4gpu"]),
    ("hardware force-added", ["++hardware=4gpu"], ["++hardware=4gpu"]),
    # ---- resources
    ("negative CPUs", ["parallelism.fit.num_cpus=-1"], ["parallelism.fit.num_cpus=-1 must be at least 1 CPU"]),
    ("zero CPUs", ["parallelism.num_folds=2", "parallelism.bag.num_cpus=0"], ["parallelism.bag.num_cpus=0 must be at least 1 CPU"]),
    ("negative GPUs", ["parallelism.fit.num_gpus=-0.5"], ["parallelism.fit.num_gpus=-0.5 is negative"]),
    ("GPU fraction above 1", ["+hardware=4gpu", "model=nn", "parallelism.fit.num_gpus=1.5", "dry_run=true"],
     ["parallelism.fit.num_gpus=1.5: above 1 a GPU count must be whole"]),
    ("total GPUs fraction above 1", ["+hardware=4gpu", "hardware.num_gpus=2.5", "dry_run=true"],
     ["hardware.num_gpus=2.5: above 1 a GPU count must be whole"]),
    ("bag above total", ["parallelism.num_folds=2", "parallelism.bag.num_cpus=64"],
     ["parallelism.bag.num_cpus=64 exceeds hardware.num_cpus="]),
    ("fit above bag", ["+hardware=4gpu", "model=nn", "parallelism.num_folds=2", "parallelism.bag.num_gpus=1",
                       "parallelism.fit.num_gpus=2", "dry_run=true"],
     ["parallelism.fit.num_gpus=2 exceeds parallelism.bag.num_gpus=1"]),
    ("model resources above the box", ["model=lightgbm", "model.lightgbm.resources.num_cpus=512"],
     ["model.lightgbm.resources.num_cpus=512 exceeds hardware.num_cpus="]),
    ("devices duplicated", ["+hardware=2gpu", "hardware.devices=[1,1]", "dry_run=true"],
     ["hardware.devices=[1, 1]: device ids must be unique"]),
    ("devices out of range", ["+hardware=2gpu", "hardware.devices=[0,5]", "dry_run=true"],
     ["device 5 is out of range"]),
    ("devices '2,' is an index", ["+hardware=2gpu", "hardware.devices='2,'", "dry_run=true"],
     ["'2,' means GPU index 2"]),
    ("devices a bool", ["+hardware=1gpu", "hardware.devices=true", "dry_run=true"], ["hardware.devices=True"]),
    ("GBM on two GPUs", ["+hardware=4gpu", "model=gbm_gpu", "model.xgboost.resources.num_gpus=2", "dry_run=true"],
     ["model.xgboost.resources.num_gpus=2: a XGBoost fit uses at most 1 GPU"]),
    ("negative folds", ["parallelism.num_folds=-2"], ["parallelism.num_folds=-2 must be >= 0"]),
    ("zero trials", ["hpo.num_trials=0"], ["hpo.num_trials=0 must be >= 1"]),
    # ---- other config values
    ("searcher misspelt", ["hpo=tpee"], ["Could not find 'hpo/tpee'", "Available options", "tpe"]),
    ("searcher by a former key", ["hpo.searcher=tpee"], ["hpo.searcher='tpee': hpo.searcher is not a key",
                                                         "hpo=tpe", "did you mean 'tpe'"]),
    ("eval metric misspelt", ["model=lightgbm", "eval_metric=auc"], ["eval_metric='auc' is not a binary metric", "roc_auc"]),
    ("eval metric of another problem", ["data=california", "model=lightgbm", "eval_metric=roc_auc"],
     ["eval_metric='roc_auc' is not a regression metric", "rmse"]),
    ("LightGBM parameter misspelt", ["model=lightgbm", "+model.lightgbm.params.num_leavs=31"],
     ["model.lightgbm.params.num_leavs is not a LightGBM parameter", "did you mean 'num_leaves'"]),
    ("XGBoost parameter misspelt", ["model=xgboost", "+model.xgboost.params.max_dept=4"],
     ["model.xgboost.params.max_dept is not an XGBoost parameter", "did you mean 'max_depth'"]),
    ("network parameter misspelt", ["model=nn", "+model.nn.params.dropuot=0.2"],
     ["model.nn.params.dropuot", "did you mean 'dropout'"]),
    ("network precision unknown", ["model=nn", "model.nn.params.precision=fp8"], ["model.nn.params.precision='fp8'"]),
    ("target outside the allowed modules", ["model=lightgbm", "model.lightgbm._target_=os.system"],
     ["model.lightgbm._target_='os.system' is outside the allowed modules"]),
    ("target that is not a model", ["model=lightgbm", "model.lightgbm._target_=pipeline.run.run"],
     ["is not a model class"]),
    ("executor by a former key", ["executor.name=ray", "model=lightgbm"],
     ["executor.name='ray': executor.name is not a key", "use executor=ray", "executor._target_="]),
    ("SQLite store under a file", ["model=lightgbm", "tracking.uri=sqlite:///good.csv/mlflow.db"],
     ["tracking.uri=sqlite:///good.csv/mlflow.db", "good.csv is a file", "tracking=none"]),
    ("tracker by a former key", ["tracking.backend=none"], ["tracking.backend='none'", "use tracking=none"]),
    ("data source by a former key", ["+data.source=csv"], ["data.source='csv'", "use data=csv"]),
    ("registry without tracking", ["model=lightgbm", "tracking=none", "tracking.register_model=clf"],
     ["tracking.register_model='clf' needs MLflow tracking"]),
    ("registry without logged models", ["model=lightgbm", "tracking.log_models=false", "tracking.register_model=clf"],
     ["tracking.register_model='clf'", "tracking.log_models=false"]),
    ("search space log from zero", ["model=lightgbm", "hpo=random", "model.lightgbm.search_space.learning_rate.low=0"],
     ["model.lightgbm.search_space.learning_rate: a log scale needs low > 0"]),
    ("resume from a non-run directory", ["model=lightgbm", "resume=/nonexistent/run"], ["resume='/nonexistent/run'"]),
    # ---- data
    ("data file missing", [*CSV, "data.path=missing.csv"], ["data.path=", "missing.csv", "no such file"]),
    ("data file empty", [*CSV, "data.path=empty.csv"], ["empty.csv", "is empty"]),
    ("data file without rows", [*CSV, "data.path=header_only.csv", "data.label=y"], ["header_only.csv", "no rows"]),
    ("label missing", ["data=csv", "data.path=good.csv", "data.label=incme"],
     ["data.label='incme' is not a column", "did you mean 'income'", "columns: age"]),
    ("label not given", ["data=csv", "data.path=good.csv"], ["data.label is required"]),
    ("label constant", [*CSV, "data.path=constant.csv"], ["data.label='income' is constant"]),
    ("label constant number", [*CSV, "data.path=constant_number.csv"],
     ["data.label='income' is constant (every row is 2)"]),
    ("label all NaN", [*CSV, "data.path=nan_label.csv"], ["data.label='income': every value of the label column is missing"]),
    ("text in a numeric column", [*CSV, "data.path=text_in_numbers.csv"], ["column 'age' is numeric but 1 row(s) hold text ('forty')"]),
    ("duplicate column names", [*CSV, "data.path=duplicate_columns.csv"], ["duplicate column names ['age']"]),
    ("unseen categories at test time", [*CSV, "data.path=good.csv", "data.test_path=unseen_test.csv",
                                        "data.unseen_categories=error"],
     ["column 'workclass': 3 test row(s) hold categories never seen in training ('Astronaut')"]),
    ("bundled data set misspelt", ["data.path=adlt"], ["data.path='adlt' is not a bundled data set", "did you mean 'adult'"]),
    ("split fraction out of range", ["data.test_size=1.5"], ["data.test_size=1.5 must be a fraction between 0 and 1"]),
    ("binary declared on three classes", [*CSV, "data.path=three_classes.csv", "data.problem_type=binary"],
     ["data.problem_type=binary but data.label='income' has 3 distinct values"]),
    ("regression on text", [*CSV, "data.path=good.csv", "data.problem_type=regression"],
     ["data.problem_type=regression but data.label='income' holds text"]),
    # ---- environment
    ("GPU asked for, none present", ["model=gbm", "+model.lightgbm.params.device_type=gpu",
                                     "+model.xgboost.params.device=cuda"],
     ["models lightgbm (params.device_type=gpu), xgboost (params.device=cuda) ask for a GPU, but this run has "
      "none (hardware.num_gpus=0)", "model.lightgbm.params.device_type=cpu model.xgboost.params.device=cpu"]),
    ("network on cuda, none present", ["model=nn_gpu", "model.nn.device=cuda"],
     ["model nn (device=cuda) asks for a GPU", "run it on the CPU: model.nn.device=cpu"]),
    ("declared box larger than this machine", ["+hardware=1gpu"],
     ["+hardware=1gpu is larger than this machine", "add dry_run=true"]),
    ("fp16 on the CPU", ["model=nn", "model.nn.params.precision=16-mixed"],
     ["model.nn.params.precision=16-mixed needs a CUDA device"]),
]

ENV_CASES = [
    # OCL_ICD_VENDORS at a folder that does not exist: the OpenCL loader finds no runtime, on any machine.
    ("LightGBM without GPU support (OpenCL)", ["model=gbm_gpu", "+hardware=1gpu", "model.lightgbm.device=cuda"],
     {"PIPELINE_SIMULATE_GPUS": "1", "OCL_ICD_VENDORS": "/nonexistent/opencl-vendors"},
     ["model.lightgbm (LightGBM with device_type=gpu): this LightGBM cannot train on the GPU", "OpenCL runtime",
      "It is on the GPU by cuda: model.lightgbm.device=cuda; model.lightgbm.device=cpu trains it on the CPU",
      "pip install lightgbm --no-binary lightgbm --config-settings=cmake.define.USE_CUDA=ON"]),
    ("LightGBM without a CUDA build", ["model=gbm_gpu", "+hardware=1gpu", "+model.lightgbm.params.device_type=cuda"],
     {"PIPELINE_SIMULATE_GPUS": "1"}, ["CUDA Tree Learner was not enabled", "--config-settings=cmake.define.USE_CUDA=ON"]),
]


@pytest.fixture
def run_main(tmp_path, monkeypatch, capsys):
    """The real entry point in-process: returns (exit code, stdout, stderr)."""
    import pipeline.__main__ as entry

    write_tables(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    def _run(args, env=None):
        from hydra.core.global_hydra import GlobalHydra

        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        monkeypatch.setattr(sys, "argv", ["pipeline", *args])
        GlobalHydra.instance().clear()
        code = 0
        try:
            entry.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run


def assert_refused(code, out, err, expected, workdir: Path):
    text = out + err
    assert code != 0, text
    for piece in expected:
        assert piece in text, f"{piece!r} not in:\n{text}"
    assert "Traceback" not in text
    store = workdir / "outputs" / "mlflow.db"
    if store.exists():
        import mlflow

        client = mlflow.MlflowClient(f"sqlite:///{store}")
        for exp in client.search_experiments():
            assert not client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")


def test_the_corpus_has_at_least_forty_cases():
    assert len(CASES) + len(ENV_CASES) + 3 >= 40  # + the three tracking cases below


@pytest.mark.parametrize("name, args, expected", CASES, ids=[c[0] for c in CASES])
def test_refused_with_one_clear_message(run_main, tmp_path, name, args, expected):
    assert_refused(*run_main(args), expected, tmp_path)


@pytest.mark.parametrize("args, expected", [
    ([*CSV, "data.path=missing.csv"], "no such file"),
    ([*CSV, "data.path=empty.csv"], "is empty"),
    ([*CSV, "data.path=good.csv", "data.test_path=missing_test.csv"], "data.test_path="),
    (["data=csv", "data.path=good.csv"], "data.label is required"),
    ([*CSV, "data.path=missing.csv", "dry_run=true"], "no such file"),
], ids=["missing", "empty", "test file missing", "no label", "dry run"])
def test_what_is_wrong_with_the_data_files_is_said_before_the_plan(run_main, tmp_path, args, expected):
    code, out, err = run_main([*args, "tracking=none"])
    assert code != 0 and expected in out + err
    assert "Plan" not in out + err
    assert not list(tmp_path.glob("outputs/**/plan.json"))


@pytest.mark.parametrize("name, args, env, expected", ENV_CASES, ids=[c[0] for c in ENV_CASES])
def test_environment_refused(cli, tmp_path, name, args, env, expected):
    """In a process of its own, as a user starts it: the OpenCL loader keeps the runtimes it found first for
    the life of its process, and the pytest process's later OpenCL tests need the machine's own."""
    write_tables(tmp_path)
    proc = cli(*args, env=env)
    assert_refused(proc.returncode, proc.stdout, proc.stderr, expected, tmp_path)


@pytest.mark.parametrize("fit_seconds", [0, 8], ids=["fits before the answer", "answer during a fit"])
def test_a_store_that_cannot_open_fails_the_run_with_its_error(run_main, tmp_path, fit_seconds):
    """What only MLflow can find (a file that is no database) is known once the tracker's process
    answers: the run stops at the first fit that ends after that (nothing evaluated), or, when
    every fit ended before it, once the graph has run; either way it fails with the store's error."""
    from tests.conftest import user_config

    (tmp_path / "mlflow.db").write_bytes(b"not a database, " * 64)
    # a tracker process of the run's own answers only once it has imported MLflow; a tracker service
    # that was started already answers before any fit ends
    args = ["model=lightgbm", "data.max_rows=600", "model.lightgbm.params.num_iterations=20",
            "tracking.keep_alive_s=0", "tracking.uri=sqlite:///mlflow.db"]
    if fit_seconds:
        searchpath = user_config(tmp_path, "model", "slow", "sleep:\n  _target_: tests.fault_models.SleepModel\n"
                                 f"  params: {{seconds: {fit_seconds}}}\n")
        args = ["model=slow", searchpath, "allowed_targets=[tests.]", "data.max_rows=600", args[-1]]
    code, out, err = run_main(args)
    assert code != 0
    assert "cannot open the MLflow store" in err and "Traceback" not in out + err
    (state,) = (tmp_path / "outputs" / "runs").glob("*/*/run_state.json")
    import json

    assert json.loads(state.read_text())["status"] == "FAILED"
    assert (state.parent / "leaderboard.csv").exists() == (not fit_seconds)


def no_fit_ran(workdir: Path) -> bool:
    """The run ended before its fits started: no fit's result, no leaderboard."""
    runs = workdir / "outputs" / "runs"
    return not any(runs.glob("*/*/tasks/*")) and not any(runs.glob("*/*/leaderboard.csv"))


def test_tracking_server_that_refuses_connections_fails_in_seconds(run_main, tmp_path):
    """One health-check request, refused: the run fails on it at once, not after minutes of MLflow's
    retries, and before any fit."""
    code, out, err = run_main(["model=lightgbm", f"tracking.uri=http://127.0.0.1:{free_port()}"])
    assert_refused(code, out, err, ["does not answer within 10 s (", "Connection refused", "tracking=none"],
                   tmp_path)
    assert no_fit_ran(tmp_path)


def test_tracking_server_that_never_answers_fails_in_seconds(run_main, tmp_path):
    """A socket that accepts and then says nothing: the health check times out after tracking.timeout_s."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted = []
    stop = threading.Event()

    def hold():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        code, out, err = run_main(["model=lightgbm", f"tracking.uri=http://127.0.0.1:{listener.getsockname()[1]}",
                                   "tracking.timeout_s=2"])
    finally:
        stop.set()
        thread.join()
        listener.setblocking(False)
        while True:  # connections still queued when the thread stopped count too
            try:
                accepted.append(listener.accept()[0])
            except (BlockingIOError, OSError):
                break
        for conn in accepted:
            conn.close()
        listener.close()
    assert_refused(code, out, err, ["does not answer within 2 s (timed out)"], tmp_path)
    assert len(accepted) == 1  # one request, given up after tracking.timeout_s: no retries
    assert no_fit_ran(tmp_path)
