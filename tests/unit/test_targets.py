"""`_target_` resolution: whole module names, a module plus one attribute, defined where it is allowed,
of the kind the key takes, all checked before anything is called."""

import pytest

from pipeline.errors import ConfigError
from pipeline.targets import ALWAYS_ALLOWED, Kind, check_allowed, inside, resolve

USER = ALWAYS_ALLOWED + ("tests.user_components",)


@pytest.mark.parametrize("allowed", [("my_pkg",), ("my_pkg.",)])
def test_an_allowed_entry_is_a_whole_module_name(allowed):
    assert inside("my_pkg", allowed) and inside("my_pkg.sub", allowed)
    assert not inside("my_pkgevil", allowed) and not inside("my_pkgevil.sub", allowed)
    with pytest.raises(ConfigError, match=r"x\._target_='my_pkgevil\.X' is outside the allowed modules"):
        check_allowed("x._target_", "my_pkgevil.X", allowed)


def test_a_prefix_of_a_module_name_does_not_admit_it():
    with pytest.raises(ConfigError, match="outside the allowed modules"):
        resolve("executor._target_", "tests.user_components.InlineBackend", ALWAYS_ALLOWED + ("tests.user",))


@pytest.mark.parametrize("target", ["pipeline.store.shutil.copyfile", "pipeline.store.os.makedirs"])
def test_attributes_are_not_walked(target):
    with pytest.raises(ConfigError, match=rf"executor\._target_='{target}' cannot be imported"):
        resolve("executor._target_", target, ALWAYS_ALLOWED)


@pytest.mark.parametrize("target, home", [
    ("pipeline.store.pickle", "module"),  # a module is not a component
    ("pipeline.targets.dataclass", "dataclasses"),  # a re-exported name: `from dataclasses import dataclass`
    ("pipeline.run.Path", "pathlib"),
])
def test_a_name_defined_outside_the_allowed_modules_is_refused(target, home):
    with pytest.raises(ConfigError, match=rf"'{target}' is (a {home}|defined in {home})"):
        resolve("tracking._target_", target, ALWAYS_ALLOWED)


@pytest.mark.parametrize("key, target", [
    ("executor._target_", "pipeline.errors.ConfigError"),
    ("executor._target_", "pipeline.tracking.NullTracker"),
    ("tracking._target_", "pipeline.graph.backend.Backend"),
    ("tracking._target_", "pipeline.errors.ConfigError"),
])
def test_a_target_of_another_kind_is_refused_before_it_is_called(key, target):
    with pytest.raises(ConfigError, match=rf"{key}='{target}' is not an? (executor|tracker) \(a subclass of"):
        resolve(key, target, ALWAYS_ALLOWED)


@pytest.mark.parametrize("key, target", [
    ("executor._target_", "pipeline.executors.local_backend"),
    ("executor._target_", "pipeline.executors.ray_backend"),
    ("tracking._target_", "pipeline.tracking.factory.mlflow_tracker"),
    ("tracking._target_", "pipeline.tracking.factory.no_tracker"),
    ("executor._target_", "tests.user_components.InlineBackend"),
    ("tracking._target_", "tests.user_components.RecordingTracker"),
])
def test_the_engines_and_a_users_components_resolve(key, target):
    from tests import user_components  # noqa: F401

    obj = resolve(key, target, USER)
    assert f"{obj.__module__}.{obj.__qualname__}" == target


@pytest.mark.parametrize("target, kind", [
    ("pipeline.executors.local_backend", "local"),
    ("pipeline.executors.ray_backend", "ray"),
    ("tests.user_components.InlineBackend", "tests.user_components.InlineBackend"),  # no kind: its target
])
def test_a_components_kind_is_its_own_attribute_else_its_target(target, kind):
    from pipeline.targets import kind_of

    assert kind_of(resolve("executor._target_", target, USER), target) == kind


@pytest.mark.parametrize("overrides, expected", [
    (["executor=ray", "executor.address=auto"], True),
    (["executor=ray"], False),  # a local Ray instance
    (["executor.address=auto"], False),  # the local executor: an address means nothing to it
    (["executor._target_=tests.user_components.InlineBackend", "executor.address=auto"], False),
])
def test_the_fits_run_on_a_cluster_when_the_ray_executor_has_an_address(compose, overrides, expected):
    from pipeline.run import Components
    from pipeline.settings import read_settings

    settings = read_settings(compose(["model=lightgbm", "allowed_targets=[tests.]", *overrides]))
    assert Components.resolve(settings).on_cluster(settings) is expected


def test_an_explicit_kind_is_checked():
    kind = Kind("pipeline.models.base.TabularModel", "a model class")
    model = resolve("model.x._target_", "pipeline.models.LightGBMModel", ALWAYS_ALLOWED, kind)
    assert model.__name__ == "LightGBMModel"
    with pytest.raises(ConfigError, match=r"'pipeline\.run\.run' is not a model class"):
        resolve("model.x._target_", "pipeline.run.run", ALWAYS_ALLOWED, kind)


@pytest.mark.parametrize("overrides, message", [
    (["model=lightgbm", "model.lightgbm.search_space.num_leaves.type=categorical",
      "+model.lightgbm.search_space.num_leaves.choices=[15,{_target_:os.getcwd}]"],
     "model.lightgbm.search_space.num_leaves.choices[1]={'_target_': 'os.getcwd'} holds a _target_"),
    (["model=lightgbm", "+data.storage_options.fs={_target_:os.getcwd,token:abc}"],
     "data.storage_options.fs={'_target_': '***', 'token': '***'} holds a _target_"),
    (["model=lightgbm", "allowed_targets=['']"], "allowed_targets: '' is not a module name"),
    (["model=lightgbm", "allowed_targets=[my-pkg]"], "allowed_targets: 'my-pkg' is not a module name"),
])
def test_read_settings_refuses_before_anything_starts(compose, overrides, message):
    from pipeline.settings import read_settings

    with pytest.raises(ConfigError) as info:
        read_settings(compose(overrides))
    assert message in str(info.value)
