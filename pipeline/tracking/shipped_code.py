"""The engine's code a logged model ships (MLflow's `code_paths`): the modules its pickle names and what
they import, not the whole package.

Loading a predictor imports the modules its pickle names (`pickled_modules`, read from the pickle's
opcodes: nothing is unpickled, so no model library is imported) and whatever those import, at module level
or inside a function (`import_closure`: every import statement counts, so a lazy import on the predict path
is shipped too). Package data beside the code (the models' cost tables) goes with it; the bundled tables
and `conf/` do not. Each shipped package extends its `__path__` to an installed engine's (`EXTENDED_PATH`):
a process that loaded the model can still import the modules the model did not need. Copies are made once
per process and closure, in a private temporary folder removed at exit (the tracker process's quick exit
included).
"""

from __future__ import annotations

import atexit
import pickletools
import re
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional

import pipeline

PACKAGE = "pipeline"
ROOT = Path(pipeline.__file__).parent
# what every model's loader imports (pipeline/tracking/mlflow_model.py: the pickle's owner check)
LOADER_MODULES = ("pipeline.trusted",)
_STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE",
            "SHORT_BINSTRING", "BINSTRING", "STRING"}
_GETS = {"BINGET", "LONG_BINGET", "GET"}

# Loading a model puts its code folder first on `sys.path` (MLflow's `code_paths`), and in that process
# the shipped copy then stands for the package: each shipped package looks for the modules it does not hold
# in an installed engine, where there is one and no one else could have written it
# (pipeline.trusted.installed_package_folders), so the process can go on using the rest
EXTENDED_PATH = ("\n# shipped with a logged model (pipeline.tracking.shipped_code): what it does not hold"
                 "\n# comes from an installed engine, where there is one\n"
                 "from pipeline.trusted import installed_package_folders as _installed  # noqa: E402\n"
                 "__path__ = [*__path__, *_installed(__name__, list(__path__))]\n")

_COPIES: dict[frozenset, Path] = {}
_ROOT: Optional[Path] = None


def pickled_modules(data: bytes) -> set[str]:
    """The modules whose globals the pickle `data` refers to (what loading it imports)."""
    memo: dict = {}
    strings: list = []
    modules: set[str] = set()
    for opcode, arg, _ in pickletools.genops(data):
        name = opcode.name
        if name in _STRINGS:
            strings.append(arg)
        elif name == "MEMOIZE":
            memo[len(memo)] = strings[-1] if strings else None
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = strings[-1] if strings else None
        elif name in _GETS:
            strings.append(memo.get(arg))
        elif name == "GLOBAL":
            modules.add(arg.split(" ", 1)[0])
        elif name == "STACK_GLOBAL" and len(strings) >= 2 and isinstance(strings[-2], str):
            modules.add(strings[-2])
    return modules


def _file(module: str) -> Optional[Path]:
    path = ROOT.parent.joinpath(*module.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


# an import statement at the start of a line: `from <module> import <names>` (the names maybe in parentheses
# over several lines) or `import <modules>`; a docstring's line read as one only adds a module that is shipped
# for nothing (a regular expression, as parsing every module took 0.3 s of a tracker's first log)
IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\((?:[^)#]|#[^\n]*)*\)|[^\n]*)"
                    r"|import[ \t]+([^\n]*))", re.MULTILINE)


def _names(text: str) -> list[str]:
    """The names of `a as b, c` or `(a,\n b)`, comments dropped."""
    text = re.sub(r"#[^\n]*", "", text).strip("() \t\n\\")
    return [part.split()[0] for part in text.split(",") if part.split()]


@lru_cache(maxsize=None)
def _imports(module: str) -> tuple[str, ...]:
    """Every module name an import statement of `module` may load (a name imported from a package may be
    a submodule: both are listed, and the closure keeps those that are files)."""
    path = _file(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for source, imported, modules in IMPORT.findall(path.read_text()):
        if modules:
            names += _names(modules)
            continue
        base = source.lstrip(".")
        level = len(source) - len(base)
        if level:
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - level + 1] + ([base] if base else []))
        names += [base, *(f"{base}.{name}" for name in _names(imported))]
    return tuple(names)


def import_closure(modules: Iterable[str]) -> frozenset[str]:
    """The engine's modules that importing `modules` (and the loader's) may load: their packages'
    `__init__` modules and every engine module imported anywhere in them, transitively."""
    seen: set[str] = set()
    todo = [*modules, *LOADER_MODULES]
    while todo:
        module = todo.pop()
        engine = module == PACKAGE or module.startswith(PACKAGE + ".")
        if module in seen or not engine or _file(module) is None:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += _imports(module)
    return frozenset(seen)


def _private_root() -> Path:
    global _ROOT
    if _ROOT is None or not _ROOT.is_dir():
        from pipeline.tracking.protocol import before_exit_now

        root = Path(tempfile.mkdtemp(prefix="pipeline-code-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        before_exit_now(lambda: shutil.rmtree(root, ignore_errors=True))
        _ROOT = root
        _COPIES.clear()
    return _ROOT


def engine_code(modules: Iterable[str] = ()) -> Path:
    """A copy of the `pipeline` package holding what a predictor whose pickle names `modules` needs to load
    and predict (`import_closure`), with the package data of the folders it uses; made once per process and
    closure (each model's log copies it into its own folder again)."""
    closure = import_closure(modules)
    root = _private_root()
    copy = _COPIES.get(closure)
    if copy is not None and copy.is_dir():
        return copy
    copy = root / str(len(_COPIES)) / PACKAGE
    files = {_file(m) for m in closure}
    folders = {f.parent for f in files}
    for folder in folders:  # the package data beside the code: not Python, not a bundled table
        files |= {f for f in folder.iterdir() if f.is_file() and f.suffix not in (".py", ".pyc", ".parquet")}
    for source in files:
        target = copy / source.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        if source.name == "__init__.py":
            with open(target, "a") as fh:
                fh.write(EXTENDED_PATH)
    _COPIES[closure] = copy
    return copy
