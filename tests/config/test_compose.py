"""Every config option composes against the typed schemas, and every target instantiates."""

from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf.errors import ConfigKeyError, ValidationError

from pipeline.models.base import TabularModel
from pipeline.settings import read_settings

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ["data", "model", "parallelism", "hpo", "executor", "tracking"]


def options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_defaults_list_is_the_table_of_contents(compose):
    import yaml

    defaults = yaml.safe_load((CONF / "config.yaml").read_text())["defaults"]
    groups = [next(iter(d)) for d in defaults if isinstance(d, dict)]
    assert groups == GROUPS
    assert defaults[-1] == "_self_"
    assert "hardware" not in groups


@pytest.mark.parametrize("group, option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes(compose, group, option):
    cfg = compose([f"{group}={option}"])
    assert cfg[group] is not None
    settings = read_settings(cfg)
    assert settings.models


@pytest.mark.parametrize("option", options("hardware"))
def test_every_hardware_profile_is_appended(compose, option):
    cfg = compose([f"+hardware={option}"])
    assert cfg.hardware.name == option
    assert read_settings(cfg).conf.hardware.num_gpus == cfg.hardware.num_gpus


@pytest.mark.parametrize("option", options("model"))
def test_every_model_spec_instantiates(compose, option):
    settings = read_settings(compose([f"model={option}"]))
    for spec in settings.models:
        model = spec.prototype()
        assert isinstance(model, TabularModel)
        assert model.name == spec.name
        assert model.params == spec.params


def test_model_all_holds_three_models(compose):
    assert list(compose(["model=all"]).model) == ["lightgbm", "xgboost", "nn"]


def test_gbm_gpu_lets_the_planner_pick_each_device(compose):
    cfg = compose(["model=gbm_gpu"])
    assert (cfg.model.lightgbm.device, cfg.model.xgboost.device) == ("auto", "auto")
    assert "device_type" not in cfg.model.lightgbm.params and "device" not in cfg.model.xgboost.params
    assert dict(cfg.model.lightgbm.gpu_params) == {"max_bin": 63, "gpu_use_dp": True}  # only on the GPU
    assert cfg.model.lightgbm.resources.num_gpus is None  # derived: one GPU per fit at most


def test_gbm_is_the_cpu_twin_of_gbm_gpu(compose):
    cpu, gpu = compose(["model=gbm"]), compose(["model=gbm_gpu"])
    assert list(cpu.model) == list(gpu.model) == ["lightgbm", "xgboost"]
    assert (cpu.model.lightgbm.device, cpu.model.xgboost.device) == ("cpu", "cpu")
    for name in ("lightgbm", "xgboost"):
        assert cpu.model[name].params == gpu.model[name].params  # the same models wherever they fit


@pytest.mark.parametrize("option, device", [("lightgbm", "cpu"), ("xgboost", "cpu"), ("nn", "cpu"),
                                            ("nn_gpu", "auto")])
def test_model_devices(compose, option, device):
    cfg = compose([f"model={option}"])
    assert {spec.device for spec in cfg.model.values()} == {device}
    assert all("device" not in spec.params for spec in cfg.model.values())  # it follows the model's device


def test_a_device_that_is_none_of_auto_cpu_cuda_names_the_key(compose):
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match=r"model.xgboost.device='gpu' is not a device; use one of auto, cpu, cuda"):
        read_settings(compose(["model=xgboost", "model.xgboost.device=gpu"]))
    assert read_settings(compose(["model=xgboost", "model.xgboost.device=CUDA"])).models[0].conf.device == "cuda"


def test_without_hardware_nothing_is_declared(compose):
    cfg = compose([])
    assert cfg.hardware is None


def test_hardware_without_plus_is_refused(compose):
    with pytest.raises(ConfigCompositionException, match=r"To append to your default list use \+hardware=4gpu"):
        compose(["hardware=4gpu"])


@pytest.mark.parametrize("overrides, key", [
    (["parallelism.num_fold=3"], "num_fold"),
    (["+hardware=4gpu", "hardware.num_cpuz=8"], "num_cpuz"),  # in an appended group
    (["model=lightgbm", "model.lightgbm.resourcez.num_cpus=1"], "resourcez"),  # in a model spec
])
def test_misspelt_key_names_it(compose, overrides, key):
    with pytest.raises(ConfigCompositionException) as info:
        compose(overrides)
    assert key in str(info.value.__cause__ or info.value)


def test_wrong_type_names_the_key(compose):
    with pytest.raises(ConfigCompositionException) as info:
        compose(["parallelism.num_folds=many"])
    cause = info.value.__cause__
    assert isinstance(cause, ValidationError) and "num_folds" in str(cause)


def test_unknown_option_lists_the_options(compose):
    with pytest.raises(MissingConfigException) as info:
        compose(["model=no_such_kind"])
    text = str(info.value)
    for option in options("model"):
        assert option in text


def test_resources_are_typed(compose):
    with pytest.raises(ConfigCompositionException) as info:
        compose(["parallelism.fit.num_gpus=half"])
    assert isinstance(info.value.__cause__, (ValidationError, ConfigKeyError))


def test_hydra_copies_of_the_config_store_share_it():
    """Hydra deep-copies its repository, store included, per group it lists (--help lists them all)."""
    import copy

    from hydra.core.config_store import ConfigStore

    import pipeline.config  # noqa: F401

    store = ConfigStore.instance()
    assert copy.deepcopy(store) is store


# The groups whose option is a component named by `_target_`, and the kind each must be.
COMPONENTS = {
    "data": "pipeline.data_sources.DataSource",
    "hpo": "pipeline.searchers.Searcher",
    "executor": "pipeline.graph.backend.Backend",
    "tracking": "pipeline.tracking.NullTracker",
}


@pytest.mark.parametrize("group, option", [(g, o) for g in COMPONENTS for o in options(g)])
def test_every_component_option_names_its_own_target(group, option):
    """Each option's YAML names its class or function, of the group's kind, with no name key beside it."""
    import yaml

    from pipeline.targets import ALWAYS_ALLOWED, Kind, resolve

    values = yaml.safe_load((CONF / group / f"{option}.yaml").read_text())
    assert values["_target_"].startswith("pipeline.")
    kind = Kind(COMPONENTS[group], group, functions=group in ("executor", "tracking"))
    resolve(f"{group}._target_", values["_target_"], ALWAYS_ALLOWED, kind)
    assert not {"backend", "source", "searcher"} & set(values)
    assert group == "data" or "name" not in values  # data.name is the data set's name, not its source's


def test_the_schemas_default_to_the_default_options_targets(compose):
    """A config composed without a group's YAML (the schema alone) names the same component."""
    import yaml

    from pipeline.config import DataConf, ExecutorConf, HpoConf, TrackingConf

    defaults = {next(iter(d)): d[next(iter(d))] for d in
                yaml.safe_load((CONF / "config.yaml").read_text())["defaults"] if isinstance(d, dict)}
    for group, schema in (("data", DataConf), ("hpo", HpoConf), ("executor", ExecutorConf), ("tracking", TrackingConf)):
        option = yaml.safe_load((CONF / group / f"{defaults[group]}.yaml").read_text())
        assert schema()._target_ == option["_target_"], group


@pytest.mark.parametrize("override, key", [
    ("executor.name=ray", "name"), ("tracking.backend=none", "backend"), ("data.source=csv", "source"),
    ("hpo.searcher=tpe", "searcher"),
])
def test_a_former_name_key_is_not_in_the_schema(compose, override, key):
    """Composed through Hydra's API, a key that once named a component fails as any unknown key does."""
    with pytest.raises(ConfigCompositionException) as info:
        compose([override])
    assert f"Key '{key}' not in" in str(info.value.__cause__ or info.value)


@pytest.mark.parametrize("override, advice", [
    ("executor.name=ray", "use executor=ray, or executor._target_=my_pkg.MyBackend"),
    ("+tracking.backend=none", "use tracking=none, or tracking._target_="),
    ("data.source=bundled", "use one of data=adult, data=california, data=csv"),
    ("hpo.searcher=tpee", "(did you mean 'tpe'?), or hpo._target_="),
])
def test_a_former_name_key_on_the_command_line_says_what_names_the_component_now(override, advice):
    from pipeline.errors import ConfigError
    from pipeline.targets import check_overrides

    check_overrides(["model=lightgbm", "executor=ray", "data.name=x", "--multirun"], CONF)  # nothing to say
    with pytest.raises(ConfigError, match="is not a key") as info:
        check_overrides(["model=lightgbm", override], CONF)
    assert advice in str(info.value)


@pytest.mark.parametrize("overrides, refused", [
    (["hardware.num_gpus=2"], True),
    (["+hardware.num_cpus=8", "model=gbm"], True),
    (["-m", "hardware.num_gpus=1,2"], True),
    (["+hardware=4gpu", "hardware.num_cpus=8"], False),  # set over an appended profile
    (["+hardware=1gpu,4gpu", "hardware.num_cpus=8", "-m"], False),
    (["--config-name=mine", "hardware.num_gpus=2"], False),  # another primary config may list hardware
    (["-cd", "my_conf", "hardware.num_gpus=2"], False),
    (["model=gbm", "parallelism.fit.num_gpus=1"], False),
])
def test_a_hardware_key_without_a_profile_names_the_profiles_to_append(overrides, refused):
    from pipeline.errors import ConfigError
    from pipeline.targets import check_overrides

    if not refused:
        check_overrides(overrides, CONF)
        return
    with pytest.raises(ConfigError, match="hardware is not in the defaults") as info:
        check_overrides(overrides, CONF)
    message = str(info.value)
    assert "+hardware=1gpu hardware." in message and "profiles: 1gpu, 2gpu, 4gpu, 8gpu, cpu" in message


@pytest.mark.parametrize("override, message", [
    ("+model.catboost={_target_:pipeline.models.catboost.CatBoostModel}",
     "model.catboost: a model is added through the model group, not as a key: model=[all,catboost] adds it"),
    ("+model.mine={_target_:my_pkg.Mine}", "model=[all,my_kind] adds it"),
    ("model.nn=null", "model.nn=null: a model is removed with ~model.nn"),
    ("~model.nn", None), ("model.nn.params.max_epochs=3", None), ("+model.nn.params.extra=1", None),
    ("++model.lightgbm={params:{num_leaves:15}}", None), ("model=[all,catboost]", None),
])
def test_a_model_added_or_removed_as_a_key_says_what_adds_or_removes_one(compose, override, message):
    from pipeline.errors import ConfigError
    from pipeline.targets import check_overrides

    if message is None:
        check_overrides([override], CONF)
        compose([override])  # and Hydra composes it
        return
    with pytest.raises(ConfigError) as info:
        check_overrides([override], CONF)
    assert message in str(info.value)
    with pytest.raises(ConfigCompositionException):  # what Hydra does with it, without the advice
        compose([override])

