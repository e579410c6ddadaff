"""The model libraries' compiled cores, reached through ctypes without importing their Python packages.

`import lightgbm` or `import xgboost` costs seconds (numpy, pandas, scikit-learn, dask probes); the
parameter checks that run before any worker starts (and in a dry run) need only the shared library:
LightGBM's table of parameters and aliases, XGBoost's own parameter validation. The library is found
by the package's own `libpath.py`, loaded by file so the package's `__init__` does not run; if that
ever fails (a layout this does not know), the package is imported and its handle used instead.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import json
import logging
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Callable, Optional

from pipeline import private_cache

log = logging.getLogger(__name__)
_WHERE = re.compile(r"^\[[\d:]+\] \S+:\d+: ")  # XGBoost's "[12:00:00] src/x.cc:27: " before a message


class LibraryMissing(ImportError):
    """The model's library is not installed in this environment."""


def _libpath(package: str):
    """The package's libpath.py, executed as a module of its own (not as package.libpath)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise LibraryMissing(f"the {package} package is not installed (pip install {package})")
    path = Path(spec.origin).parent / "libpath.py"
    module_spec = importlib.util.spec_from_file_location(f"_pipeline_{package}_libpath", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _load(package: str, find: Callable, imported: Callable[[], ctypes.CDLL]) -> ctypes.CDLL:
    if package in sys.modules:  # already paid for: use the package's own handle
        return imported()
    try:
        return ctypes.cdll.LoadLibrary(find(_libpath(package)))
    except LibraryMissing:
        raise
    except Exception as exc:  # noqa: BLE001 - an unknown layout: the package finds its library itself
        log.debug("loading %s's library by its libpath.py failed (%s); importing the package", package, exc)
        return imported()


# ---------------------------------------------------------------- LightGBM
@functools.lru_cache(maxsize=1)
def lightgbm_parameters() -> dict[str, str]:
    """Every parameter name and alias this LightGBM build knows, each to its parameter's name
    (LGBM_DumpParamAliases: what lightgbm's own `_ConfigAliases` reads)."""

    def imported():
        from lightgbm.basic import _LIB

        return _LIB

    lib = _load("lightgbm", lambda m: m._find_lib_path()[0], imported)
    lib.LGBM_GetLastError.restype = ctypes.c_char_p
    size = 1 << 20
    while True:
        needed = ctypes.c_int64(0)
        buffer = ctypes.create_string_buffer(size)
        if lib.LGBM_DumpParamAliases(ctypes.c_int64(size), ctypes.byref(needed), buffer) != 0:
            raise RuntimeError(lib.LGBM_GetLastError().decode())
        if needed.value <= size:
            break
        size = needed.value
    names = {}
    for param, aliases in json.loads(buffer.value.decode()).items():
        names[param] = param
        names.update((alias, param) for alias in aliases)
    return names


# ---------------------------------------------------------------- XGBoost
class XGBoostRejected(ValueError):
    """XGBoost refused a parameter's value (its own message)."""


def _warn(message: bytes) -> None:
    """XGBoost's log lines as its Python package shows them: warnings as warnings, the rest at debug."""
    text = message.decode(errors="replace")
    if "WARNING:" in text:
        warnings.warn(text, UserWarning, stacklevel=2)
    else:
        log.debug(text.rstrip())


_LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)(_warn)  # kept alive while the library may call it


@functools.lru_cache(maxsize=1)
def _xgboost() -> ctypes.CDLL:
    def imported():
        from xgboost.core import _LIB

        return _LIB

    own = "xgboost" not in sys.modules
    lib = _load("xgboost", lambda m: m.find_lib_path()[0], imported)
    lib.XGBGetLastError.restype = ctypes.c_char_p
    if own:  # importing xgboost later registers its own callback in place of this one
        lib.XGBRegisterLogCallback(_LOG_CALLBACK)
    return lib


def xgboost_configure(params: list[tuple[str, str]], num_feature: int = 2) -> tuple[dict, list[str]]:
    """Configure a booster with no data as `xgb.train` would (validate_parameters on), and return its
    configuration and the warnings XGBoost gave; XGBoostRejected for a value it refuses.

    Creating a booster starts XGBoost's CUDA runtime, which on a machine with an NVIDIA driver
    initialises the devices (seconds, even for a CPU booster). On such a machine the booster is made in
    a child process that sees no device, so this process (the driver of a run) never starts CUDA for a
    check. The answer depends only on the library build and the parameters, so an accepted
    configuration is kept in the user's cache, keyed by both."""
    entry = _cache_entry(params, num_feature)
    kept = private_cache.read_json("xgboost-params", entry) if entry is not None else None
    try:
        return kept["config"], kept["said"]
    except (KeyError, TypeError):
        pass  # absent or unreadable: ask the library
    config, said = _configure_apart(params, num_feature) if cuda_driver_present() else _xgboost_configure(params, num_feature)
    if entry is not None:
        private_cache.keep_json("xgboost-params", entry, {"config": config, "said": said})
    return config, said


def _cache_entry(params: list[tuple[str, str]], num_feature: int) -> Optional[str]:
    """The name the answer for these parameters from this XGBoost build is kept under; None when the
    build's file is not known (the package found its library itself)."""
    try:
        library = Path(_libpath("xgboost").find_lib_path()[0])
        stat = library.stat()
    except Exception:  # noqa: BLE001 - an unknown layout: no key, so no cache
        return None
    key = json.dumps([str(library), stat.st_size, stat.st_mtime_ns, num_feature, params])
    return f"{hashlib.sha256(key.encode()).hexdigest()}.json"


def _xgboost_configure(params: list[tuple[str, str]], num_feature: int) -> tuple[dict, list[str]]:
    lib = _xgboost()
    handle = ctypes.c_void_p()

    def call(code: int) -> None:
        if code != 0:
            first = lib.XGBGetLastError().decode().strip().splitlines()[0]
            raise XGBoostRejected(_WHERE.sub("", first))

    call(lib.XGBoosterCreate(None, ctypes.c_uint64(0), ctypes.byref(handle)))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for key, value in [("num_feature", str(num_feature)), ("validate_parameters", "1"), *params]:
                call(lib.XGBoosterSetParam(handle, key.encode(), value.encode()))
            length, text = ctypes.c_uint64(), ctypes.c_char_p()
            call(lib.XGBoosterSaveJsonConfig(handle, ctypes.byref(length), ctypes.byref(text)))
        config = json.loads(text.value.decode())
    finally:
        lib.XGBoosterFree(handle)
    return config, [str(w.message) for w in caught]


def cuda_driver_present() -> bool:
    """Whether this machine has an NVIDIA driver, which a library's CUDA runtime would start."""
    return any(Path(p).exists() for p in ("/dev/nvidiactl", "/proc/driver/nvidia"))


_CONFIGURE = ("import sys; from pipeline.models.native import _configure_main; "
              "sys.exit(_configure_main(sys.argv[1:]))")
_REJECTED = 3


def _configure_apart(params: list[tuple[str, str]], num_feature: int) -> tuple[dict, list[str]]:
    """_xgboost_configure in a child process that sees no CUDA device (CUDA_VISIBLE_DEVICES empty)."""
    import subprocess

    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", _CONFIGURE, json.dumps([params, num_feature])], env=env,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode == _REJECTED:
        raise XGBoostRejected(proc.stdout.strip())
    if proc.returncode != 0:
        raise RuntimeError(f"checking XGBoost's parameters in a child process failed (exit {proc.returncode}): "
                           f"{proc.stderr.strip()[-2000:]}")
    answer = json.loads(proc.stdout)
    return answer["config"], answer["said"]


def _configure_main(argv: list[str]) -> int:
    params, num_feature = json.loads(argv[0])
    try:
        config, said = _xgboost_configure([tuple(p) for p in params], num_feature)
    except XGBoostRejected as exc:
        print(str(exc))
        return _REJECTED
    print(json.dumps({"config": config, "said": said}))
    return 0


def config_keys(config: Optional[dict]) -> set[str]:
    """Every leaf key of an XGBoost JSON configuration: the parameter names it knows."""
    keys, stack = set(), [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(v, (dict, list)):
                    stack.append(v)
                else:
                    keys.add(k)
        elif isinstance(node, list):
            stack.extend(node)
    return keys
