"""MLflow's Source of a run: the command the user typed, secrets masked."""

from pipeline.run import user_command


def test_the_source_is_the_users_command_with_its_secrets_masked():
    argv = ["/home/me/project/pipeline/__main__.py", "-m", "model=lightgbm,xgboost",
            "+data.storage_options.token=hunter2", "tracking.uri=http://alice:pw123@host:5000"]
    command = user_command(argv)
    assert command.startswith("python -m pipeline -m model=lightgbm,xgboost +data.storage_options.token=")
    assert "hunter2" not in command and "pw123" not in command and "http://alice:***@host:5000" in command
    assert user_command(["bench.py", "seed=1"]) == "bench.py seed=1"
