"""What a user's `--help` and dry run import, as whole processes (`-X importtime`): the model libraries,
torch and scikit-learn stay off both paths, numpy and pandas off `--help`. Their wall time is a
benchmark (`python -m bench --suite startup,fixed_cost`), not a test."""

import pytest

LIBRARIES = ("torch", "sklearn", "scipy", "lightgbm", "xgboost", "mlflow", "matplotlib", "ray", "optuna")


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
        (["+hardware=4gpu", "model=all", "dry_run=true", "tracking=none"], LIBRARIES),
    ],
    ids=["help", "dry_run"],
)
def test_start_up_path_imports(cli, args, absent):
    proc = cli(*args, env={"PYTHONPROFILEIMPORTTIME": "1"}, check=True)
    names = imported(proc.stderr)
    assert "hydra" in names and "pipeline" in names  # the profile was read
    assert sorted(names & set(absent)) == []
