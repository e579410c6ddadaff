"""A model kind's profile: everything the engine knows of a kind besides fitting and predicting.

Each adapter declares one frozen `ModelProfile` as its class's `profile`; the planner, the memory plan,
the device choice, the workers' preloads, the lean imports, the saved predictors and their MLflow
requirements read it there, so no table outside `pipeline/models/` names a library.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from pipeline.fit_cost import Calibration
    from pipeline.memory.estimates import Estimate, FitShape
    from pipeline.memory.shape import DataShape

MiB = 2**20


def generic_memory(params: dict, fit: "FitShape", on_gpu: bool) -> "Estimate":
    """A model that states nothing: the frames of its rows, three copies of its training rows as floats."""
    from pipeline.memory.estimates import Estimate, feature_bytes

    return Estimate(0, 0, {"fold_copies": (fit.train + fit.held_out) * feature_bytes(fit),
                           "model": 3 * fit.train * fit.features * 8})


def no_gpu_params(local: tuple[int, ...]) -> dict:
    return {}


@dataclass(frozen=True, eq=False)  # one object per kind: compared and hashed by identity
class ModelProfile:
    """What one model kind is, declared once beside its adapter."""

    library: str  # its name in messages: "LightGBM"
    # the packages a fit imports (workers import them before their first fit; their versions key the cache)
    modules: tuple[str, ...] = ()
    # what a saved predictor requires from PyPI: per package, its distribution's name, then the names of other
    # builds of it that may be installed in its place (the requirement names the one installed)
    distributions: tuple[tuple[str, ...], ...] = ()
    fit_imports: tuple[str, ...] = ()  # what a fit imports on first use, imported by workers ahead too
    # `<package>.compat` modules that import scikit-learn only to define estimators the engine never builds:
    # a lean run imports them without it (pipeline.lean_imports)
    lean: tuple[str, ...] = ()
    # ---- memory (pipeline.memory): one fit's own structures, for a FitShape, on the CPU or a GPU
    memory: Callable[[dict, "FitShape", bool], "Estimate"] = generic_memory
    import_bytes: int = 0  # resident memory importing `modules` adds to a process
    memory_hint: str = ""  # a parameter that lowers a fit's memory, for messages ({name}: the model)
    # ---- threads and devices
    # the share of a fit's one-thread time that more threads do not shorten (pipeline.planning.payoff)
    thread_serial_share: float = 0.3
    # CPU threads a fit on a GPU holds when the config leaves them to the engine: what the library does on
    # the host beside the device (pipeline.resources.cpus_beside_gpu_fits)
    gpu_fit_cpus: int = 1
    max_gpus_per_fit: Optional[int] = 1  # GBMs: one device per fit; networks: None (DDP)
    device_param: str = ""  # the library parameter that takes 'cpu' or 'cuda' as it is, if any
    # the accelerators (pipeline.accelerators) its library has a build for; None: not stated (a class of yours)
    accelerators: Optional[frozenset[str]] = None
    gpu_params: Callable[[tuple[int, ...]], dict] = no_gpu_params  # its params for a fit on these ordinals
    # ---- the deadline: predicting a row with one round's trees takes a / (features + b) of the time training
    # takes per row and round; (a, b) fit the upper envelope of measured shapes (FitContext.scoring_seconds)
    predict_cost: tuple[float, float] = (0.0, 1.0)
    # ---- the device choice (pipeline.planning.device_choice): measured fit times per learner and device
    costs: Optional[Path] = None  # its calibration (YAML, pipeline.fit_cost's format); None: none measured
    cost_name: str = ""  # the name its learners (`<cost_name>/cpu`) and packing are keyed by there
    # ---- what it saves: fitted objects (module, class) a save pickles once for all the files holding them
    shared_objects: tuple[tuple[str, str], ...] = ()
    # the attribute holding its fitted object where a save compresses it (pipeline.models.packing: large and
    # regular, as a forest's whole trees); "": pickled as it is
    packed: str = ""
    # hpo=auto's first trials after the model's own params: proven configurations of this kind (values of
    # its search space; a key outside the space, or a value outside its range, is left to the sampler)
    portfolio: tuple[dict, ...] = ()
    # ---- hpo=auto's added kinds (pipeline.planning.budget): a kind whose cost grows faster than its rows
    # states the rough seconds of a 5-fold bag and its test rows' prediction on one CPU, for (training rows,
    # the table's shape: pipeline.memory.shape.DataShape); one that would take more than a tenth of the limit
    # is left out. None: the table's size rule alone bounds it
    bag_seconds: Optional[Callable[[int, "DataShape"], float]] = None
    # params that make a fit short (fewer rounds or epochs): smoke runs and the conformance suite
    quick: tuple[tuple[str, object], ...] = ()

    def calibration(self) -> "Calibration":
        """Its measured fit times (empty where none were measured)."""
        return _calibration(self.costs)

    @property
    def costs_label(self) -> str:
        """Where its calibration lives (or would), for messages."""
        if self.costs is None:
            return f"{self.library}'s profile has no calibration"
        root = Path(__file__).resolve().parents[2]
        return str(self.costs.relative_to(root)) if self.costs.is_relative_to(root) else str(self.costs)


@functools.lru_cache(maxsize=None)
def _calibration(path: Optional[Path]) -> "Calibration":
    from pipeline.fit_cost import Calibration, load

    return load(path) if path is not None else Calibration({}, {}, {})


def loaded_profiles() -> list[ModelProfile]:
    """The profiles of every model kind imported in this process (pipeline.models.base.TabularModel's
    subclasses), without importing any."""
    import sys

    base = sys.modules.get("pipeline.models.base")
    if base is None or not hasattr(base, "TabularModel"):
        return []
    seen, stack, out = set(), list(base.TabularModel.__subclasses__()), []
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        stack.extend(cls.__subclasses__())
        profile = cls.__dict__.get("profile")
        if isinstance(profile, ModelProfile):
            out.append(profile)
    return out
