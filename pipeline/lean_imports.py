"""Model libraries (LightGBM, XGBoost) imported without their scikit-learn estimators.

Both libraries import scikit-learn, where it is installed, only to define their scikit-learn estimators
(`lightgbm.LGBMClassifier`, `xgboost.XGBClassifier`), and scikit-learn imports SciPy's statistics on the
way: most of what importing either library costs (LightGBM: 0.16 s without it, 1.25 s with it on the
2-core box), paid by the driver, the forkserver and every Ray worker that fits. The engine trains through
the libraries' own training APIs (`lgb.train`, `xgb.train` and their Boosters) and uses none of them.

`install()` puts a finder first on `sys.meta_path`. While a module a model kind's profile names as `lean`
(`lightgbm.compat`, `xgboost.compat`: pipeline.models.profile) runs in a thread and scikit-learn is not
imported yet, that thread's imports of scikit-learn fail as if it were
not installed: the libraries' own fallback, after which their scikit-learn estimators raise when built.
No other import changes: scikit-learn imports as usual in other threads, from other modules and later.
The composition root installs it for runs whose every class is the engine's own (`Settings.lean_imports`);
processes started for such a run install it first (`pipeline.executors.lean_preload`).
"""

from __future__ import annotations

import importlib.abc
import logging
import sys
import threading
from typing import Optional

log = logging.getLogger("pipeline")

HIDDEN = "sklearn"
PRELOAD = "pipeline.executors.lean_preload"  # what a lean run's processes import first


class LeanFinder(importlib.abc.MetaPathFinder):
    """Hides `hidden` from the thread that runs one of the `compat` modules, while it runs (by default the
    `lean` modules of the model kinds imported in this process)."""

    def __init__(self, compat: Optional[tuple[str, ...]] = None, hidden: str = HIDDEN):
        self.compat, self.hidden = (None if compat is None else frozenset(compat)), hidden
        self.local = threading.local()
        self.lean: set[str] = set()  # the libraries imported without `hidden` in this process

    def _compat(self) -> frozenset:
        if self.compat is not None:
            return self.compat
        profiles = sys.modules.get("pipeline.models.profile")  # imported by every kind's adapter
        if profiles is None:
            return frozenset()
        return frozenset(module for profile in profiles.loaded_profiles() for module in profile.lean)

    def find_spec(self, name, path, target=None):
        if name.endswith(".compat") and name in self._compat():
            spec = self._spec_from_others(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _HidingLoader(spec.loader, self, name.partition(".")[0])
            return spec
        if getattr(self.local, "hiding", False) and (name == self.hidden or name.startswith(self.hidden + ".")):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

    def _spec_from_others(self, name, path, target):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                return spec
        return None


class _HidingLoader(importlib.abc.Loader):
    """The compat module's own loader, run with its library's `hidden` imports failing in this thread
    (unless that package is imported already: then nothing is hidden)."""

    def __init__(self, loader, finder: LeanFinder, library: str):
        self.loader, self.finder, self.library = loader, finder, library

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        hiding = self.finder.hidden not in sys.modules
        self.finder.local.hiding = hiding
        try:
            self.loader.exec_module(module)
        finally:
            self.finder.local.hiding = False
        if hiding:
            self.finder.lean.add(self.library)

    def __getattr__(self, name):  # get_source, get_filename, is_package ...: the real loader's
        return getattr(self.loader, name)


_finder = LeanFinder()


def install() -> None:
    """Put the finder first on sys.meta_path (once per process); libraries imported before stay as they are."""
    if not installed():
        sys.meta_path.insert(0, _finder)


def installed() -> bool:
    """Whether this process imports the libraries lean from now on."""
    return _finder in sys.meta_path


def for_run(lean: bool) -> None:
    """Install for a lean run. A run that is not lean (a class of the user's) in a process whose earlier
    run imported a library lean (a sweep's jobs one after another) is warned: that class cannot build
    the library's scikit-learn estimators here."""
    if lean:
        install()
    elif _finder.lean:
        libraries = sorted(_finder.lean)
        log.warning("%s was imported in this process without scikit-learn by an earlier run: a class of yours "
                    "cannot build %s's scikit-learn estimators here (run it in a process of its own)",
                    " and ".join(libraries), "/".join(libraries))
