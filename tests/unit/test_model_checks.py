"""Model parameter checks that run before any worker starts: cheap (no library import), correct
(the library's own table and validation), and the network's options checked in one torch-free place."""

import dataclasses
import json
import subprocess
import sys

import pytest

from pipeline.errors import ConfigError
from pipeline.models import LightGBMModel, TorchMLPModel, XGBoostModel, native
from pipeline.nn.options import LoopConfig, check

HEAVY = ("numpy", "pandas", "torch", "sklearn", "lightgbm", "xgboost", "scipy", "pyarrow")


def _fresh_python(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_parameter_checks_import_no_library():
    """Every model's check_params, passing and failing, in a fresh process: none of the model libraries,
    numpy or pandas is imported (importing lightgbm or xgboost costs seconds)."""
    out = _fresh_python(
        "import json, sys\n"
        "from pipeline.errors import ConfigError\n"
        "from pipeline.models import LightGBMModel, TorchMLPModel, XGBoostModel\n"
        "LightGBMModel.check_params('lightgbm', {'num_leaves': 31, 'min_data_in_leaf': 5})\n"
        "XGBoostModel.check_params('xgboost', {'max_depth': 3, 'num_boost_round': 10}, 'multiclass')\n"
        "TorchMLPModel.check_params('nn', {'precision': 'bf16-mixed'})\n"
        "errors = []\n"
        "for cls, params in ((LightGBMModel, {'num_leafs': 31}), (XGBoostModel, {'max_dept': 3})):\n"
        "    try:\n"
        "        cls.check_params('m', params)\n"
        "    except ConfigError as exc:\n"
        "        errors.append(str(exc))\n"
        f"print(json.dumps({{'errors': errors, 'heavy': [m for m in {HEAVY!r} if m in sys.modules]}}))\n"
    )
    assert out["heavy"] == []
    assert len(out["errors"]) == 2 and "did you mean 'num_leaves'" in out["errors"][0]
    assert "did you mean 'max_depth'" in out["errors"][1]


def test_lightgbm_names_are_the_librarys_own_table():
    from lightgbm.basic import _ConfigAliases

    theirs = _ConfigAliases._get_all_param_aliases()
    ours = native.lightgbm_parameters()
    assert set(ours) == {name for param, aliases in theirs.items() for name in (param, *aliases)}
    assert ours["num_leaf"] == "num_leaves" and ours["num_leaves"] == "num_leaves"


def test_lightgbm_misspelling_names_the_parameter_not_an_alias():
    with pytest.raises(ConfigError, match=r"model\.lightgbm\.params\.num_leafs .*did you mean 'num_leaves'"):
        LightGBMModel.check_params("lightgbm", {"num_leafs": 31})
    LightGBMModel.check_params("lightgbm", {"num_leaf": 31, "n_estimators": 10})  # aliases are parameters too


def test_library_found_by_its_package_when_the_layout_is_unknown(monkeypatch):
    """A wheel without libpath.py where this looks: the package's own handle is used instead; a
    package that is not installed is named."""

    def unknown_layout(package):
        raise FileNotFoundError(f"{package}/libpath.py")

    package_handle = object()
    monkeypatch.setattr(native, "_libpath", unknown_layout)
    monkeypatch.delitem(sys.modules, "lightgbm", raising=False)  # as if not imported yet: the fast path is tried
    assert native._load("lightgbm", lambda m: m._find_lib_path()[0], lambda: package_handle) is package_handle
    monkeypatch.undo()
    with pytest.raises(native.LibraryMissing, match="pip install no_such_library"):
        native._load("no_such_library", lambda m: m.find_lib_path()[0], lambda: package_handle)


@pytest.mark.parametrize(
    "params, problem, message",
    [
        ({"max_depth": "deep"}, "binary", r"XGBoost rejects them: Invalid Parameter format for max_depth"),
        ({"objective": "binary:logistc"}, None, r"XGBoost rejects them: Unknown objective function: `binary:logistc`"),
        ({"scale_pos_weight": 2.0}, "multiclass", r"params\.scale_pos_weight is not an XGBoost parameter"),
    ],
)
def test_xgboost_validates_as_the_library_does(params, problem, message):
    with pytest.raises(ConfigError, match=message):
        XGBoostModel.check_params("xgboost", params, problem)


def test_xgboost_passes_what_its_python_package_accepts():
    XGBoostModel.check_params(
        "xgboost",
        {"max_depth": 3, "eval_metric": ["auc", "logloss"], "monotone_constraints": [1, -1],
         "early_stopping_rounds": None, "num_boost_round": 5, "scale_pos_weight": 2.0},
        "binary",
    )


def test_xgboost_asks_the_library_once_per_build_and_parameters(tmp_path, monkeypatch):
    """Creating a booster starts CUDA where a driver exists (seconds): an accepted answer is kept in the
    cache, keyed by the library file and the parameters; a new build of the library asks again, and a
    value the library refuses is asked every time (nothing kept)."""
    monkeypatch.setenv("PIPELINE_CACHE_DIR", str(tmp_path / "cache"))
    library = tmp_path / "libxgboost.so"
    library.write_bytes(b"build 1")
    monkeypatch.setattr(native, "_libpath", lambda package: type("libpath", (), {
        "find_lib_path": staticmethod(lambda: [str(library)])}))
    asked = []
    real = native._xgboost_configure

    def counting(params, num_feature):
        asked.append(dict(params))
        return real(params, num_feature)

    monkeypatch.setattr(native, "_xgboost_configure", counting)
    for _ in range(2):
        XGBoostModel.check_params("xgboost", {"max_depth": 3}, "binary")
        with pytest.raises(ConfigError, match=r"params\.scale_pos_weight is not an XGBoost parameter"):
            XGBoostModel.check_params("xgboost", {"scale_pos_weight": 2.0}, "multiclass")  # from the cache too
    assert len(asked) == 2
    for _ in range(2):
        with pytest.raises(ConfigError, match="XGBoost rejects them"):
            XGBoostModel.check_params("xgboost", {"max_depth": "deep"}, "binary")
    assert len(asked) == 4
    library.write_bytes(b"build 2, another size")
    XGBoostModel.check_params("xgboost", {"max_depth": 3}, "binary")
    assert len(asked) == 5 and asked[-1]["max_depth"] == "3"
    (tmp_path / "a file").write_text("")
    monkeypatch.setenv("PIPELINE_CACHE_DIR", str(tmp_path / "a file"))  # no cache to be had: asked, no error
    for _ in range(2):
        XGBoostModel.check_params("xgboost", {"max_depth": 3}, "binary")
    assert len(asked) == 7


def test_network_loop_does_not_import_the_model_and_options_import_no_torch():
    out = _fresh_python(
        "import json, sys\n"
        "import pipeline.nn.options\n"
        "torch_for_options = 'torch' in sys.modules\n"
        "import pipeline.nn.loop\n"
        "print(json.dumps({'torch_for_options': torch_for_options,\n"
        "                  'models': sorted(m for m in sys.modules if m.startswith('pipeline.models'))}))\n"
    )
    assert out == {"torch_for_options": False, "models": []}


@pytest.mark.parametrize(
    "params, message",
    [
        ({"precision": "64"}, r"params\.precision='64' is not one of 32, 16-mixed, bf16-mixed"),
        ({"lr_scaling": "cubic"}, r"params\.lr_scaling='cubic' is not one of none, linear, sqrt"),
        ({"patience": -1}, r"params\.patience=-1 must be an integer >= 0"),
        ({"learning_rate": 0}, r"params\.learning_rate=0 must be > 0"),
        ({"hidden_sizes": "64"}, r"params\.hidden_sizes='64' must be a list of positive ints"),
        ({"compile": "yes"}, r"params\.compile='yes' must be false, true"),
    ],
)
def test_network_options_are_checked_in_one_place(params, message):
    """The model's check (before any fit) and the loop's config give the same error for the same value."""
    with pytest.raises(ConfigError, match=rf"model\.nn\.{message}"):
        TorchMLPModel.check_params("nn", params)
    with pytest.raises(ConfigError, match=message):
        LoopConfig.from_params(params)
    if params.keys() <= {f.name for f in dataclasses.fields(LoopConfig)}:
        with pytest.raises(ConfigError, match=message):
            LoopConfig(**params)  # what the loop is given
    with pytest.raises(ConfigError, match=message):
        check(params)
