"""Data sources and searchers named by their class (`_target_`), a user's own included."""

import pandas as pd
import pytest

from pipeline.errors import ConfigError
from pipeline.settings import read_settings


def test_a_users_own_data_source_by_target(cli, tmp_path):
    record = tmp_path / "read.txt"
    cli("data._target_=tests.user_sources.Halves", "+data.options.rows=600",
        f"+data.options.record={record}",
        "allowed_targets=[tests.]", "model=lightgbm", "model.lightgbm.params.num_iterations=30", "seed=7",
        "tracking=none", check=True)
    assert record.read_text() == "600 rows, seed 7"  # its keywords and the run's seed reached it
    (run_dir,) = sorted((tmp_path / "outputs" / "runs").glob("*/*"))
    board = pd.read_csv(run_dir / "leaderboard.csv").set_index("model")
    assert board.loc["lightgbm"].filter(like="roc_auc").min() > 0.97  # the sign of x0 is learnt: its table was used


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data._target_=pipeline.data_sources.ParquettSource"],
         "data._target_='pipeline.data_sources.ParquettSource' cannot be imported"),
        (["data._target_=tests.user_sources.Halves"],
         "data._target_='tests.user_sources.Halves' is outside the allowed modules (pipeline.)"),
        (["data._target_=tests.user_sources.Listed", "allowed_targets=[tests.]"],
         "data._target_='tests.user_sources.Listed' is not a data source class"),
        (["data.path=adullt"], "data.path='adullt' is not a bundled data set; bundled: adult, california_housing "
                               "(did you mean 'adult'?)"),
        (["hpo._target_=pipeline.searchers.TpeSerch"], "hpo._target_='pipeline.searchers.TpeSerch' cannot be imported"),
        (["hpo._target_=tests.user_sources.Halves", "allowed_targets=[tests.]"],
         "hpo._target_='tests.user_sources.Halves' is not a searcher class"),
    ],
)
def test_component_choices_are_checked_when_the_config_is_read(compose, overrides, message):
    with pytest.raises(ConfigError) as info:
        read_settings(compose(["model=lightgbm", *overrides]))
    assert message in str(info.value)


def test_the_config_groups_are_the_settings(compose):
    settings = read_settings(compose(["model=lightgbm", "data=california", "hpo=tpe", "+hardware=2gpu",
                                      "resume=true", "seed=5"]))
    from pipeline.config import DataConf, HardwareConf, HpoConf, Resume

    assert isinstance(settings.conf.data, DataConf) and settings.conf.data.label == "MedHouseVal"
    assert settings.conf.data.seed == 5 and settings.conf.hpo.seed == 5  # null: the run's seed
    assert isinstance(settings.conf.hpo, HpoConf) and settings.conf.hpo._target_ == "pipeline.searchers.TpeSearch"
    assert isinstance(settings.conf.hardware, HardwareConf) and settings.conf.hardware.num_gpus == 2
    assert settings.resume == Resume(newest=True)
    assert read_settings(compose(["model=lightgbm", "resume=runs/a"])).resume == Resume(directory="runs/a")
    assert read_settings(compose(["model=lightgbm", "resume=true"])).resume == Resume(newest=True)
    assert read_settings(compose(["model=lightgbm", "resume=False"])).resume == Resume()


def test_resume_is_typed_by_the_schema(compose):
    """A value that is no run directory, true or false is refused by Hydra as it composes, naming the key."""
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match=r"resume=\[1\]") as info:
        compose(["model=lightgbm", "resume=[1]"])
    assert "Cannot convert 'list' to string" in str(info.value.__cause__)
    assert "full_key: resume" in str(info.value.__cause__)
    assert not read_settings(compose(["model=lightgbm"])).resume
