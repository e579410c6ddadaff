"""What planning is given: typed, frozen values the composition root builds from the settings once
(`pipeline.settings.Settings.plan_input`); planning never reads the config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from pipeline.memory.budget import MemoryRequest
from pipeline.resources import Request

if TYPE_CHECKING:
    from pipeline.config import HardwareConf
    from pipeline.hardware import Machine
    from pipeline.memory.shape import DataShape


@dataclass(frozen=True)
class ModelInput:
    """One configured model (a pipeline.settings.ModelSpec: its name, class, params, requested device,
    own resources) and how many trials it runs."""

    spec: Any
    num_trials: int

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class Levels:
    """`parallelism`, checked: the folds, the bag's and the fit's requests (CPUs and GPU shares, memory)."""

    num_folds: int
    bag: Request
    fit: Request
    bag_memory: MemoryRequest
    fit_memory: MemoryRequest
    sequential: bool = False
    fit_cpus_most: Optional[int] = None  # a machine others keep busy: no derived fit above this (busy_box)


@dataclass(frozen=True)
class DataInput:
    """The data as planning sees it before loading: its shape (None: unknown, a remote or missing file)
    and the split's fractions."""

    shape: Optional[DataShape]
    test_size: float
    val_size: float


@dataclass(frozen=True)
class PlanInput:
    """Everything `make_plan` reads."""

    models: tuple[ModelInput, ...]
    levels: Levels
    data: DataInput
    machine: Machine  # this machine, or a Ray cluster's totals
    declared: Optional[HardwareConf] = None  # the declared hardware (+hardware=...); None: detected
    lean_imports: bool = False
    dry_run: bool = False
    refit: bool = False
    stack_levels: int = 0
    on_cluster: bool = False  # the fits run on the cluster's nodes, not this machine
