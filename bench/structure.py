"""Structure figures: how far one follows the code from an entry point, read statically.

`python -m bench.structure pipeline/run.py:run:cfg [--json] [--moves]` parses every module of the start's
package (the first folder of the path) with `ast`, starts at the function (`run`; `Class.method` also
works) and walks depth-first, in source order, the calls each visited function makes to functions, methods
and classes of that package. The last part (`cfg`) names the start's argument whose flow is followed; the
walk follows every resolvable call of each visited function, so it is recorded, not used to prune.

How a call is resolved (anything else, such as a method called on a value, is not followed):
- a name: a function or class of the module, or one imported (module level or inside the function,
  absolute or relative, `as` names, re-exports through a package's `__init__` followed);
- `module.name`, `package.module.name`, `Class.method`, through the same imports;
- `self.m()` / `cls.m()` / `super().m()` inside a method: the method of its class or of a base class
  defined in the package;
- a class called: its `__init__`, `__post_init__` and `__new__`, where the class or a base defines them
  (a class with none is visited as a leaf).
Calls inside nested functions and lambdas count as the enclosing function's; each callee is walked once.

The figures:
- room: a module with at least one visited function (the start's module included);
- move: a distinct (caller, callee) call, met in the walk, whose callee lives in another module than the
  caller (calls to a callee already walked count too; it is not walked again);
- climb back up: a move into a module that a frame above the caller on the current call stack is in
  (the walk goes back toward the root instead of down);
- root re-entry: a move into the start's module from another module (each is also a climb back up);
- return: the walk coming back, once a callee in another module has been walked, to its caller's module
  (what a reader does who follows the calls with a finger; returns to the root's module counted apart);
- continuation lines: lines of the visited modules that end in a backslash outside strings and comments,
  which line-based structure tools misread (`ast` itself reads them).
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

INIT_METHODS = ("__init__", "__post_init__", "__new__")


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    package: str  # what a relative import is relative to
    defs: dict = field(default_factory=dict)  # name -> FunctionDef | ClassDef at module level
    imports: dict = field(default_factory=dict)  # local name -> ("module", mod) | ("symbol", mod, name)


def _import_bindings(node: ast.AST, package: str, modules: dict) -> dict:
    """What the names an import statement binds refer to."""
    out = {}
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.asname:
                out[a.asname] = ("module", a.name)
            else:
                top = a.name.split(".")[0]
                out[top] = ("module", top)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            parts = parts[: len(parts) - node.level + 1]
            base = ".".join([*parts, base] if base else parts)
        for a in node.names:
            local = a.asname or a.name
            full = f"{base}.{a.name}"
            out[local] = ("module", full) if full in modules else ("symbol", base, a.name)
    return out


def load_package(root: Path, package: str) -> dict[str, Module]:
    folder = root / package
    modules: dict[str, Module] = {}
    for path in sorted(folder.rglob("*.py")):
        parts = (package, *path.relative_to(folder).with_suffix("").parts)
        is_init = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_init else parts)
        pkg = name if is_init else name.rpartition(".")[0]
        modules[name] = Module(name, path, ast.parse(path.read_text(), str(path)), pkg)
    for m in modules.values():
        for node in m.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                m.defs[node.name] = node
        for node in ast.walk(m.tree):  # imports anywhere at module level, also under if/try
            if isinstance(node, (ast.Import, ast.ImportFrom)) and _at_module_level(m.tree, node):
                m.imports.update(_import_bindings(node, m.package, modules))
    return modules


def _at_module_level(tree: ast.Module, target: ast.AST) -> bool:
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if node is target:
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return False


@dataclass(frozen=True)
class Target:
    """A walkable thing: a function or method (`qual` "f" or "C.m") or a class (`qual` "C", `is_class`)."""

    module: str
    qual: str
    is_class: bool = False


class Walker:
    def __init__(self, modules: dict[str, Module]):
        self.modules = modules

    # -- resolution -------------------------------------------------------------------------------
    def symbol(self, module: str, name: str, seen=()) -> Optional[object]:
        """`name` as seen in `module`: ("module", m) or a Target, or None outside the package."""
        if (module, name) in seen or module not in self.modules:
            return None
        m = self.modules[module]
        node = m.defs.get(name)
        if node is not None:
            return Target(module, name, isinstance(node, ast.ClassDef))
        if f"{module}.{name}" in self.modules:
            return ("module", f"{module}.{name}")
        bound = m.imports.get(name)
        return self._binding(bound, seen + ((module, name),)) if bound else None

    def _binding(self, bound, seen=()) -> Optional[object]:
        if bound[0] == "module":
            return ("module", bound[1]) if bound[1] in self.modules else None
        return self.symbol(bound[1], bound[2], seen)

    def _class_node(self, t: Target) -> ast.ClassDef:
        return self.modules[t.module].defs[t.qual.split(".")[0]]

    def method(self, cls: Target, name: str, seen=()) -> Optional[Target]:
        """`name` defined in class `cls` or a base class in the package (depth first, like simple MRO)."""
        if cls in seen:
            return None
        node = self._class_node(cls)
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                return Target(cls.module, f"{cls.qual}.{name}")
        for base in self.bases(cls):
            found = self.method(base, name, seen + (cls,))
            if found:
                return found
        return None

    def bases(self, cls: Target) -> list[Target]:
        out = []
        for b in self._class_node(cls).bases:
            r = self.expression(b, cls.module, {})
            if isinstance(r, Target) and r.is_class:
                out.append(r)
        return out

    def expression(self, node: ast.AST, module: str, local: dict, owner: Optional[Target] = None):
        """What a callee expression refers to, or None."""
        if isinstance(node, ast.Name):
            if node.id in local:
                return self._binding(local[node.id])
            if owner is not None and node.id in ("self", "cls"):
                return ("instance", owner)
            return self.symbol(module, node.id)
        is_super = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
        if is_super and owner:
            return ("super", owner)
        if isinstance(node, ast.Attribute):
            base = self.expression(node.value, module, local, owner)
            if base is None:
                return None
            if isinstance(base, tuple) and base[0] == "module":
                return self.symbol(base[1], node.attr)
            if isinstance(base, tuple) and base[0] == "instance":
                return self.method(base[1], node.attr)
            if isinstance(base, tuple) and base[0] == "super":
                return next((m for b in self.bases(base[1]) if (m := self.method(b, node.attr))), None)
            if isinstance(base, Target) and base.is_class:
                return self.method(base, node.attr)
        return None

    # -- a function's calls -----------------------------------------------------------------------
    def _definition(self, t: Target) -> ast.AST:
        first, _, rest = t.qual.partition(".")
        node = self.modules[t.module].defs[first]
        if rest:
            node = next(i for i in node.body if isinstance(i, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and i.name == rest)
        return node

    def calls(self, t: Target) -> list[Target]:
        """The package's functions `t` calls, in source order, each once. A class's are those of its
        `__init__`, `__post_init__` and `__new__` (wherever defined), `self` being the class called."""
        if t.is_class:
            parts = [(m, t) for name in INIT_METHODS if (m := self.method(t, name))]
        else:
            parts = [(t, Target(t.module, t.qual.split(".")[0], True) if "." in t.qual else None)]
        out: list[Target] = []
        for fn_t, owner in parts:
            fn = self._definition(fn_t)
            local: dict = {}
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    local.update(_import_bindings(node, self.modules[fn_t.module].package, self.modules))
            nested = {n.name for n in ast.walk(fn) if n is not fn and isinstance(
                n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
            calls = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Call)),
                           key=lambda n: (n.lineno, n.col_offset))
            for call in calls:
                if isinstance(call.func, ast.Name) and call.func.id in nested:
                    continue
                r = self.expression(call.func, fn_t.module, local, owner)
                if isinstance(r, Target) and r not in out and r != t:
                    out.append(r)
        return out


def continuation_lines(path: Path) -> list[int]:
    """Lines ending in a backslash continuation (not inside a string or a comment)."""
    source = path.read_text()
    inside: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", -1)):
            inside.update(range(tok.start[0], tok.end[0]))  # a line the token continues past
            if tok.type == tokenize.COMMENT:
                inside.add(tok.start[0])
    lines = enumerate(source.splitlines(), 1)
    return [i for i, line in lines if line.rstrip().endswith("\\") and i not in inside]


def walk(root: Path, start: str) -> dict:
    """The figures for `path.py:function[:argument]` under `root` (see the module's docstring)."""
    path, _, rest = start.partition(":")
    function, _, argument = rest.partition(":")
    rel = Path(path)
    package = rel.parts[0]
    modules = load_package(root, package)
    parts = rel.with_suffix("").parts
    module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    if module not in modules:
        raise SystemExit(f"{path}: not a module of package {package!r} under {root}")
    walker = Walker(modules)
    first, _, method = function.partition(".")
    start_t = walker.symbol(module, first)
    if method and isinstance(start_t, Target):
        start_t = walker.method(start_t, method)
    if not isinstance(start_t, Target):
        raise SystemExit(f"{path}: no function {function!r}")

    visited: set[Target] = set()
    order: list[Target] = []
    moves: list[dict] = []
    seen_edges: set[tuple[Target, Target]] = set()
    returns: list[str] = []  # the module the walk comes back to after walking a callee in another one

    def visit(t: Target, stack: list[Target]) -> None:
        visited.add(t)
        order.append(t)
        above = {f.module for f in stack}  # modules of the frames above t
        for callee in walker.calls(t):
            if (t, callee) in seen_edges:
                continue
            seen_edges.add((t, callee))
            if callee.module != t.module:
                moves.append({"from": f"{t.module}:{t.qual}", "to": f"{callee.module}:{callee.qual}",
                              "climb_back_up": callee.module in above,
                              "root_reentry": callee.module == start_t.module})
            if callee not in visited:
                visit(callee, stack + [t])
                if callee.module != t.module:
                    returns.append(t.module)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    visit(start_t, [])
    rooms = sorted({t.module for t in order})
    continuations = {m: lines for m in rooms if (lines := continuation_lines(modules[m].path))}
    return {
        "start": start, "argument": argument or None,
        "rooms": len(rooms), "moves": len(moves),
        "climbs_back_up": sum(m["climb_back_up"] for m in moves),
        "root_reentries": sum(m["root_reentry"] for m in moves),
        "returns": len(returns), "root_returns": returns.count(start_t.module),
        "functions_visited": len(order),
        "continuation_lines": sum(len(v) for v in continuations.values()),
        "continuations": {modules[m].path.relative_to(root).as_posix(): v for m, v in continuations.items()},
        "room_list": rooms,
        "move_list": moves,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.structure", description=__doc__.split("\n\n")[0])
    p.add_argument("start", help="path/to/module.py:function[:argument], e.g. pipeline/run.py:run:cfg")
    p.add_argument("--root", type=Path, default=Path.cwd(), 
                   help="the folder that holds the package (default: .)")
    p.add_argument("--json", action="store_true", help="print every figure, room and move as JSON")
    p.add_argument("--moves", action="store_true", help="also list the moves")
    args = p.parse_args(argv)
    figures = walk(args.root.resolve(), args.start)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"{figures['start']}: {figures['rooms']} rooms, {figures['moves']} moves, "
          f"{figures['climbs_back_up']} climbs back up, {figures['root_reentries']} root re-entries; "
          f"{figures['returns']} returns ({figures['root_returns']} to the root's module), "
          f"{figures['functions_visited']} functions visited, "
          f"{figures['continuation_lines']} continuation lines")
    for path, lines in figures["continuations"].items():
        print(f"  continuation: {path}:{','.join(map(str, lines))}")
    if args.moves:
        for m in figures["move_list"]:
            flags = " ".join(k for k in ("climb_back_up", "root_reentry") if m[k])
            print(f"  {m['from']} -> {m['to']} {flags}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
