"""What a user's `--help` and dry run import, as whole processes (`-X importtime`): the model libraries,
torch and scikit-learn stay off both paths, numpy and pandas off `--help`, psutil off both (Linux's
/proc/meminfo gives the RAM), and an untracked run imports no HTTP client. Their wall time is a
benchmark (`python -m bench --suite startup,fixed_cost`), not a test."""

import pytest

LIBRARIES = ("torch", "sklearn", "scipy", "lightgbm", "xgboost", "mlflow", "matplotlib", "ray", "optuna")


def modules(stderr: str) -> set[str]:
    """Module names from Python's -X importtime lines."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def imported(stderr: str) -> set[str]:
    """Top-level package names from Python's -X importtime lines."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            names.add(name.split(".")[0])
    return names


@pytest.mark.parametrize(
    "args, absent",
    [
        (["--help"], LIBRARIES + ("numpy", "pandas", "pyarrow", "psutil", "rich")),
        (["+hardware=4gpu", "model=all", "dry_run=true", "tracking=none"], LIBRARIES + ("psutil",)),
    ],
    ids=["help", "dry_run"],
)
def test_start_up_path_imports(cli, args, absent):
    proc = cli(*args, env={"PYTHONPROFILEIMPORTTIME": "1"}, check=True)
    names = imported(proc.stderr)
    assert "hydra" in names and "pipeline" in names  # the profile was read
    assert sorted(names & set(absent)) == []
    if "tracking=none" in args:  # no tracking server to ask: no HTTP client
        assert sorted(modules(proc.stderr) & {"urllib.request", "http.client"}) == []


def test_the_run_mode_is_read_without_composing_the_config_twice():
    from hydra._internal.hydra import Hydra
    from hydra.types import RunMode

    import pipeline.__main__ as entry

    assert Hydra.get_mode is entry._mode_from_command_line
    assert Hydra.get_mode(None, "config", ["model=all", "hydra.mode=MULTIRUN"]) is RunMode.MULTIRUN
    assert Hydra.get_mode(None, "config", ["hydra.mode=run"]) is RunMode.RUN
    assert Hydra.get_mode(None, "config", ["model=all", "seed=1,2"]) is None  # `-m` decides, as in Hydra


def test_hydra_mode_on_the_command_line_still_sweeps(cli, tmp_path):
    proc = cli("model=lightgbm", "dry_run=true", "tracking=none", "hydra.mode=MULTIRUN", "seed=1,2",
               f"hydra.sweep.dir={tmp_path / 'sweep'}", check=True)
    assert sorted(p.parent.name for p in (tmp_path / "sweep").glob("*/plan.json")) == ["0", "1"], proc.stdout
    refused = cli("model=lightgbm", "dry_run=true", "seed=1,2")  # a sweep without -m stays an error
    assert refused.returncode != 0 and "--multirun" in refused.stderr


@pytest.mark.parametrize("in_process", ["always", "never"])
def test_a_run_fits_lightgbm_and_xgboost_without_importing_scikit_learn(cli, in_process):
    """The driver, the forkserver and the workers (all write the import profile to this stderr) import
    LightGBM and XGBoost without scikit-learn and SciPy's statistics (pipeline.lean_imports)."""
    proc = cli("model=gbm", "data.max_rows=3000", "tracking=none", f"executor.in_process={in_process}",
               env={"PYTHONPROFILEIMPORTTIME": "1"}, check=True)
    names = modules(proc.stderr)
    # the libraries' cores (a package imported in the driver's import thread has no line of its own there)
    assert {"lightgbm.basic", "xgboost.core"} <= names and "best: " in proc.stdout
    # -X importtime also lists the refused `import sklearn` itself (microseconds): none of its modules ran
    assert sorted(n for n in names if n.startswith(("sklearn.", "scipy.stats"))) == []
    if in_process == "never":
        assert "pipeline.executors.lean_preload" in names  # the forkserver installed it before its preloads


def test_a_run_with_a_model_class_of_the_users_imports_the_libraries_as_they_are(cli):
    from tests.conftest import FAULT_ENV

    proc = cli("model=lightgbm", "data.max_rows=3000", "tracking=none", "allowed_targets=[tests.]",
               "model.lightgbm._target_=tests.user_components.MyLightGBM",
               env={"PYTHONPROFILEIMPORTTIME": "1", **FAULT_ENV}, check=True)
    names = modules(proc.stderr)
    assert {"lightgbm.basic", "sklearn.base", "scipy.stats"} <= names and "pipeline.executors.lean_preload" not in names
