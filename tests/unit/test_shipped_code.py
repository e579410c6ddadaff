"""The engine modules a logged model ships: the import statements read from each module's text."""

import ast

import pytest

from pipeline.tracking import shipped_code
from pipeline.tracking.shipped_code import ROOT, _imports, import_closure

MODULES = sorted(".".join(f.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
                 for f in ROOT.rglob("*.py"))


def parsed_imports(module: str) -> set[str]:
    """What Python's own parser finds: every import statement's modules and imported names."""
    path = shipped_code._file(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found |= {base, *(f"{base}.{alias.name}" for alias in node.names)}
    return found


@pytest.mark.parametrize("module", MODULES)
def test_every_import_statement_of_the_engine_is_read(module):
    assert parsed_imports(module) <= set(_imports(module))


def test_the_forms_of_an_import_statement(tmp_path, monkeypatch):
    package = tmp_path / "pipeline"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import leaf  # relative\n")
    (package / "sub" / "leaf.py").write_text(
        "import os, pipeline.alpha as a\n"
        "from ..beta import (  # a comment (with parentheses)\n"
        "    one,  # first\n"
        "    two as second,\n"
        ")\n"
        "def later():\n"
        "    from pipeline.gamma import three\n")
    for name in ("alpha", "beta", "gamma", "unused"):
        (package / f"{name}.py").write_text("")
    monkeypatch.setattr(shipped_code, "ROOT", package)
    _imports.cache_clear()
    try:
        expected = {"os", "pipeline.alpha", "pipeline.beta", "pipeline.beta.one", "pipeline.beta.two",
                    "pipeline.gamma"}
        assert set(_imports("pipeline.sub.leaf")) >= expected
        closure = import_closure({"pipeline.sub.leaf"}) - {"pipeline.trusted"}
        assert closure == {"pipeline", "pipeline.sub", "pipeline.sub.leaf", "pipeline.alpha", "pipeline.beta",
                           "pipeline.gamma"}
    finally:
        _imports.cache_clear()


def test_a_model_s_code_holds_neither_the_planner_nor_the_execution_graph():
    """A fit-time estimate (pipeline.planning.payoff) reached from a model's profile once brought the planning
    package's `__init__` along, and with it the planner, the graph and the checks: 92 modules a model, 70
    without them."""
    for kind in ("lightgbm", "xgboost", "nn", "linear", "knn"):
        shipped = import_closure([f"pipeline.models.{kind}", "pipeline.predictor_source"])
        assert "pipeline.planning.payoff" in shipped
        planner = [m for m in shipped if m == "pipeline.planning.planner" or m.startswith("pipeline.graph")]
        assert not planner, kind


def test_a_model_s_code_holds_no_other_kind_s_adapter_nor_the_network_s_loop():
    """pipeline.models named the default kinds' adapters by importing them, so every logged model shipped
    the network's training loop and both boosters' adapters (a LightGBM model 70 modules, 443 KB; 62 and
    370 KB with the names imported on first use)."""
    adapters = {f"pipeline.models.{kind}" for kind in ("lightgbm", "xgboost", "nn", "catboost")}
    loop = {"pipeline.nn.loop", "pipeline.nn.network", "pipeline.nn.ddp"}
    for kind in ("lightgbm", "xgboost", "knn", "linear", "catboost"):
        shipped = import_closure([f"pipeline.models.{kind}", "pipeline.predictor_source"])
        assert shipped & adapters <= {f"pipeline.models.{kind}"}, kind
        assert not shipped & loop, kind
    assert loop <= import_closure(["pipeline.models.nn"])


def test_the_default_adapters_stay_importable_from_the_models_package():
    import pipeline.models as models
    from pipeline.models.nn import TorchMLPModel

    assert models.TorchMLPModel is TorchMLPModel and "XGBoostModel" in dir(models)
    with pytest.raises(AttributeError, match="NoSuchModel"):
        models.NoSuchModel  # noqa: B018
