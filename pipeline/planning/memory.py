"""Memory in planning: the data's shape, each model's estimate, the caps."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Callable, Optional

from pipeline.memory.budget import Advice, Capacity, MemoryPlan, capacity, plan_model
from pipeline.memory.estimates import Estimate, FitShape, common_parts, stack_bytes
from pipeline.memory.shape import DataShape
from pipeline.planning.inputs import PlanInput
from pipeline.resources import Allocation


class MemoryPlanner:
    """Reads the data's shape and the capacities once; then reserves and caps each model's fits."""

    def __init__(self, given: PlanInput, hardware):
        self.given = given
        self.profiles, self.lean = [m.spec.cls.profile for m in given.models], given.lean_imports
        self.shape = given.data.shape
        self.capacity: Optional[Capacity] = None
        note = ""
        if self.shape is None:
            note = "the data's size is unknown before loading it (a remote or missing file): memory is not planned"
        else:
            declared = given.declared
            self.capacity = capacity(declared, hardware, given.machine, self.shape, dry_run=given.dry_run)
            # on a cluster, this machine's RAM says nothing of the nodes'
            if given.on_cluster and (declared is None or declared.memory_gb is None):
                self.capacity = dataclasses.replace(
                    self.capacity, ram=None, ram_source="unknown on a cluster: set hardware.memory_gb per node"
                )
        self.summary = MemoryPlan(self.shape, self.capacity, note)
        self.stack_columns = 0  # a fit above level 1 also learns from each model kind's outputs on the level below
        if given.stack_levels and self.shape is not None:
            self.stack_columns = len(given.models) * self.fit_shape(self.shape).classes

    def fit_shape(self, shape: DataShape) -> FitShape:
        d = self.given.data
        return FitShape.of(shape, self.given.levels.num_folds, d.test_size, d.val_size)

    def estimate(self, spec, on_gpu: bool, shape: Optional[DataShape] = None, stack_columns: int = 0) -> Estimate:
        """One fit of `spec` (a ModelSpec): its library's structures plus what every fit holds; with
        `stack_columns`, a fit above level 1, whose rows have those columns after the table's."""
        shape = shape or self.shape
        fit = self.fit_shape(shape)
        wide = fit
        if stack_columns:
            wide = self.fit_shape(dataclasses.replace(shape, numeric=shape.numeric + stack_columns))
        own = spec.cls.memory_estimate(spec.params, wide, on_gpu)
        parts = {**common_parts(fit, self.profiles, self.lean), **own.parts}
        if stack_columns:
            parts["stack_features"] = stack_bytes(fit, stack_columns)
        return Estimate(sum(parts.values()), own.gpu, parts)

    def plan(self, spec, allocation: Allocation, reallocate: Callable[[Fraction], Allocation]) -> Allocation:
        if self.shape is None or self.capacity is None:
            return allocation
        on_gpu = allocation.fit.num_gpus > 0 and spec.cls.gpu_request(spec.params)[0]
        estimate = self.estimate(spec, on_gpu)
        above = self.estimate(spec, on_gpu, stack_columns=self.stack_columns) if self.stack_columns else None
        levels = self.given.levels
        limits = spec.memory.over(levels.fit_memory)
        hint = spec.cls.profile.memory_hint.format(name=spec.name) if spec.cls.profile.memory_hint else ""
        advice = Advice(lambda room, gpu: self._rows_within(spec, room, gpu, on_gpu), hint)
        return plan_model(allocation, estimate, limits, levels.bag_memory, self.capacity, reallocate, advice,
                          above=above)

    def _rows_within(self, spec, room: int, gpu: bool, on_gpu: bool) -> Optional[int]:
        """The most rows (data.max_rows) whose widest fit's estimate stays within `room` bytes."""
        main = self.shape.rows - (self.shape.test_rows or 0)

        def need(rows: int) -> int:
            shape = dataclasses.replace(self.shape, rows=rows + (self.shape.test_rows or 0))
            e = self.estimate(spec, on_gpu, shape, self.stack_columns)
            return e.gpu if gpu else e.ram

        if need(10) > room:
            return None
        low, high = 10, main
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if need(mid) <= room else (low, mid - 1)
        return low if low < main else None

