"""pipeline.lean_imports: LightGBM and XGBoost imported without scikit-learn in a lean run's processes,
the libraries still training; scikit-learn itself importable as usual, in other threads too."""

import json
import subprocess
import sys
import textwrap
import threading

import pytest

from pipeline.lean_imports import LeanFinder

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent("""
    import json, sys
    if sys.argv[1] == "lean":
        import pipeline.executors.lean_preload
    import lightgbm, numpy as np, xgboost
    out = {"sklearn": "sklearn" in sys.modules, "scipy.stats": "scipy.stats" in sys.modules}
    X = np.random.default_rng(0).random((300, 4)); y = (X[:, 0] > 0.5).astype(int)
    lgb = lightgbm.train({"objective": "binary", "verbosity": -1}, lightgbm.Dataset(X, y), 10)
    xgb = xgboost.train({"objective": "binary:logistic"}, xgboost.DMatrix(X, label=y), 10)
    out["lightgbm_auc_proxy"] = float((lgb.predict(X)[y == 1].mean() - lgb.predict(X)[y == 0].mean()))
    out["xgboost_auc_proxy"] = float((xgb.predict(xgboost.DMatrix(X))[y == 1].mean()
                                      - xgb.predict(xgboost.DMatrix(X))[y == 0].mean()))
    try:
        lightgbm.LGBMClassifier()
        out["estimator"] = "built"
    except Exception as exc:
        out["estimator"] = type(exc).__name__
    from sklearn.metrics import roc_auc_score  # scikit-learn itself still imports
    out["roc_auc"] = float(roc_auc_score(y, lgb.predict(X)))
    print(json.dumps(out))
""")


def probe(mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_lean_process_imports_the_libraries_without_scikit_learn_and_they_train():
    lean, full = probe("lean"), probe("full")
    assert full["sklearn"] and full["scipy.stats"] and full["estimator"] == "built"  # what the libraries do alone
    assert not lean["sklearn"] and not lean["scipy.stats"]
    assert lean["estimator"] == "LightGBMError"  # the library's own answer without scikit-learn
    assert lean["lightgbm_auc_proxy"] > 0.5 and lean["xgboost_auc_proxy"] > 0.5
    assert lean["roc_auc"] > 0.99  # scikit-learn imported afterwards works


@pytest.fixture
def fake_library(tmp_path, monkeypatch):
    """fakelib (its compat module waits at a gate, then tries `import fakedep`) and fakedep, on sys.path."""
    (tmp_path / "fakelib").mkdir()
    (tmp_path / "fakelib" / "__init__.py").write_text("")
    (tmp_path / "fakelib" / "gate.py").write_text("import threading\nentered = threading.Event()\n"
                                                    "release = threading.Event()\n")
    (tmp_path / "fakelib" / "compat.py").write_text(textwrap.dedent("""
        from fakelib import gate
        gate.entered.set()
        gate.release.wait(30)
        try:
            import fakedep
            HAS_DEP = True
        except ImportError:
            HAS_DEP = False
    """))
    (tmp_path / "fakedep").mkdir()
    (tmp_path / "fakedep" / "__init__.py").write_text("VALUE = 42\n")
    (tmp_path / "fakedep" / "sub.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = LeanFinder(compat=("fakelib.compat",), hidden="fakedep")
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    yield finder
    for name in [m for m in sys.modules if m.split(".")[0] in ("fakelib", "fakedep")]:
        del sys.modules[name]


def test_only_the_thread_running_compat_misses_the_hidden_package(fake_library):
    import importlib

    gate = importlib.import_module("fakelib.gate")
    result = {}
    compat = threading.Thread(target=lambda: result.update(compat=importlib.import_module("fakelib.compat")))
    compat.start()
    assert gate.entered.wait(30)
    other = importlib.import_module("fakedep.sub")  # another thread, while compat runs with fakedep hidden
    assert other.__name__ == "fakedep.sub" and sys.modules["fakedep"].VALUE == 42
    del sys.modules["fakedep"], sys.modules["fakedep.sub"]  # compat must still find it hidden, not imported
    gate.release.set()
    compat.join(30)
    assert result["compat"].HAS_DEP is False
    assert fake_library.lean == {"fakelib"}
    assert importlib.import_module("fakedep").VALUE == 42  # after compat, in this thread too


def test_a_hidden_package_already_imported_is_not_hidden(fake_library):
    import importlib

    importlib.import_module("fakedep")
    importlib.import_module("fakelib.gate").release.set()
    assert importlib.import_module("fakelib.compat").HAS_DEP is True
    assert fake_library.lean == set()


def test_a_run_of_the_engines_classes_only_is_lean_and_its_workers_install_first(compose):
    from pipeline.settings import read_settings

    lean = read_settings(compose(["model=gbm"]))
    assert lean.lean_imports
    assert lean.worker_modules == ("pipeline.executors.lean_preload", "lightgbm", "xgboost")


@pytest.mark.parametrize("override", [
    "model.lightgbm._target_=tests.user_components.MyLightGBM",
    "tracking._target_=tests.user_components.RecordingTracker",
    "executor._target_=tests.user_components.InlineBackend",
], ids=["model", "tracker", "executor"])
def test_a_run_with_a_class_of_the_users_imports_the_libraries_as_they_are(compose, override):
    from pipeline.settings import read_settings

    settings = read_settings(compose(["model=gbm", "allowed_targets=[tests.]", override]))
    assert not settings.lean_imports
    assert settings.worker_modules == ("lightgbm", "xgboost")


RSS = textwrap.dedent("""
    import re, sys
    import numpy, pandas, pyarrow
    def rss():
        return int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
    before = rss()
    if sys.argv[1] == "lean":
        import pipeline.executors.lean_preload
    import lightgbm, xgboost
    print(rss() - before)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status (Linux)")
def test_the_memory_estimate_counts_what_scikit_learn_adds_to_a_process():
    from pipeline.memory.estimates import SKLEARN_BYTES, worker_bytes

    def added(mode):
        proc = subprocess.run([sys.executable, "-c", RSS, mode], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout.strip().splitlines()[-1])

    measured = added("full") - added("lean")
    assert 0.85 <= SKLEARN_BYTES / measured <= 1.15, measured / 2**20
    from pipeline.models import LightGBMModel, TorchMLPModel, XGBoostModel

    gbms = [LightGBMModel.profile, XGBoostModel.profile]
    assert worker_bytes(gbms, lean=False) - worker_bytes(gbms) == SKLEARN_BYTES
    torch = [TorchMLPModel.profile]
    assert worker_bytes(torch, lean=False) == worker_bytes(torch)  # torch imports no scikit-learn
