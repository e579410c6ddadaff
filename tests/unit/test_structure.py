"""The code's shape: no import circles between modules (imports inside functions count, as they run
too) or between packages, and no module over 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"pipeline": ROOT / "pipeline", "hydra_plugins": ROOT / "plugins" / "hydra_plugins"}
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    out = {}
    for top, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = (top, *path.relative_to(folder).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module of ours `name` imports, wherever the import statement sits."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            # `from package import submodule` imports the submodule; `from module import name` the module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_no_module_imports_itself_through_others():
    assert _cycles(_graph()) == []


def test_no_two_packages_import_each_other():
    """Between sub-packages (pipeline.tracking, pipeline.memory, ...): the top-level modules of `pipeline`
    are the composition root and the shared vocabulary, so only loops among sub-packages count."""
    modules = _modules()
    packages = {name for name, path in modules.items() if path.name == "__init__.py" and name.count(".") == 1}

    def package_of(module):
        return next((p for p in packages if module == p or module.startswith(p + ".")), None)

    folders: dict[str, set[str]] = {}
    for name, targets in _graph().items():
        source = package_of(name)
        if source is None:
            continue
        folders.setdefault(source, set()).update(t for t in map(package_of, targets) if t and t != source)
    assert _cycles(folders) == []


def test_the_analysis_sees_an_import_inside_a_function(tmp_path):
    """The guard can fail: a function-level import that closes a circle is found."""
    graph = {"a": {"b"}, "b": set()}
    assert _cycles(graph) == []
    graph["b"].add("a")
    assert _cycles(graph) == [["a", "b"]]
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from pipeline.levels import derived_gpu_share\n")
    assert _imports("pipeline.x", source, {"pipeline.levels": source, "pipeline.x": source}) == {"pipeline.levels"}


def test_no_module_is_over_400_lines():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}
