"""Keys added with Hydra's `+`: a key that no schema holds is refused naming it (Hydra's own advice for a key
not in the config is `+key=value`, which OmegaConf would keep as an attribute nothing reads), and a model's
search space takes new dimensions, typed as its own are."""

from __future__ import annotations

import pytest

from pipeline.config import SearchDimConf
from pipeline.errors import ConfigError
from pipeline.hpo import TrialSource
from pipeline.settings import read_settings


@pytest.mark.parametrize("override, message", [
    ("+time_limit=60", "time_limit=60 is not a key of the config (did you mean 'time_limit_s'?)"),
    ("+hpo.num_trial=100", "hpo.num_trial=100 is not a key of hpo (did you mean 'num_trials'?)"),
    ("+parallelism.num_fold=3",
     "parallelism.num_fold=3 is not a key of parallelism (did you mean 'num_folds'?)"),
    ("+parallelism.bag.num_gpu=1", "parallelism.bag.num_gpu=1 is not a key of parallelism.bag "
     "(did you mean 'num_gpus'?); its keys: num_cpus, num_gpus, memory_gb, gpu_memory_gb"),
    ("+model.lightgbm.resources.num_cpu=2",
     "model.lightgbm.resources.num_cpu=2 is not a key of model.lightgbm.resources "
     "(did you mean 'num_cpus'?)"),
    ("+model.lightgbm.devices=cuda", "model.lightgbm.devices='cuda' is not a key of model.lightgbm "
                                     "(did you mean 'device'?)"),
    ("+data.lable=income", "data.lable='income' is not a key of data (did you mean 'label'?)"),
])
def test_a_key_added_where_no_schema_holds_it_is_refused_naming_it(compose, override, message):
    with pytest.raises(ConfigError) as info:
        read_settings(compose(["model=lightgbm", override]))
    assert message in str(info.value)


@pytest.mark.parametrize("override, read", [
    ("+model.lightgbm.params.max_bin=63", lambda s: s.models[0].params["max_bin"] == 63),  # the library's own
    ("+data.storage_options.anon=true", lambda s: s.conf.data.storage_options["anon"] is True),
    ("+tracking.tags.team=risk", lambda s: s.conf.tracking.tags["team"] == "risk"),
])
def test_keys_added_to_open_maps_are_kept(compose, override, read):
    assert read(read_settings(compose(["model=lightgbm", override])))


def test_a_dimension_added_to_a_models_search_space_is_typed_and_searched(compose):
    settings = read_settings(compose([
        "model=xgboost", "hpo=random", "hpo.num_trials=20", "hpo.start_from_defaults=false",
        "+model.xgboost.params.grow_policy=depthwise",
        "+model.xgboost.search_space.grow_policy={type:categorical,choices:[depthwise,lossguide]}",
        "+model.xgboost.search_space.max_leaves={type:int,low:4,high:256,log:true}"]))
    spec = settings.models[0]
    assert spec.search_space["max_leaves"] == SearchDimConf("int", 4, 256, log=True)
    assert spec.search_space["grow_policy"] == SearchDimConf("categorical",
                                                             choices=["depthwise", "lossguide"])
    assert isinstance(spec.search_space["eta"], SearchDimConf)  # its own, typed alike
    source = TrialSource(settings.conf.hpo, {spec.name: spec.search_space}, {spec.name: spec.params},
                         "maximize")
    asked = [source.params(spec.name, t) for t in range(20)]
    assert all(4 <= a["max_leaves"] <= 256 for a in asked)
    assert {a["grow_policy"] for a in asked} == {"depthwise", "lossguide"}


@pytest.mark.parametrize("dimension, message", [
    ("{typ:float,low:0,high:1}",
     "model.xgboost.search_space.extra.typ: Key 'typ' not in 'SearchDimConf' "
     "(a dimension's keys: type, low, high, log, step, choices)"),
    ("{type:int,low:few,high:9}", "model.xgboost.search_space.extra.low: Value 'few'"),
    ("3", "model.xgboost.search_space.extra=3 is not a mapping of a dimension's keys"),
    ("{type:float,low:2,high:1}", "model.xgboost.search_space.extra: low=2.0 must be below high=1.0"),
])
def test_an_added_dimension_that_is_no_dimension_is_refused_naming_it(compose, dimension, message):
    with pytest.raises(ConfigError) as info:
        read_settings(compose(["model=xgboost", "hpo=random",
                               f"+model.xgboost.search_space.extra={dimension}"]))
    assert message in str(info.value)
