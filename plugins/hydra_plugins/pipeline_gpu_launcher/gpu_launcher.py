"""The `hydra/launcher=gpu` plugin class; the work is in `_core`, imported only when a sweep runs."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.pipeline_gpu_launcher.config import GpuLauncherConf


class GpuLauncher(Launcher):
    """Runs the jobs of a sweep in worker processes, one per slot of GPUs and CPUs, each kept warm
    for the slot's next job.

    Several jobs run at once, as many as the slots allow (or `n_jobs`); a job sees only its slot's
    devices through CUDA_VISIBLE_DEVICES and its shares through PIPELINE_SLOT_CPUS/PIPELINE_SLOT_GPUS.
    """

    def __init__(self, **options: Any) -> None:
        # Hydra passes the fields of `GpuLauncherConf`, the launcher's one schema, as keyword arguments
        plain = {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in options.items()}
        self.settings = GpuLauncherConf(**plain)
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra_plugins.pipeline_gpu_launcher import _slots

        _slots.check_machine(self.settings)
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from hydra_plugins.pipeline_gpu_launcher import _core

        return _core.launch(self, job_overrides, initial_job_idx)

    def launch_stream(
        self,
        next_job: Callable[[], Optional[tuple[int, Sequence[str]]]],
        on_return: Callable[[int, JobReturn], None],
        *,
        max_jobs: int,
    ) -> None:
        """Start a job whenever a slot frees: `next_job()` gives (job number, overrides) or None when
        there is no more; `on_return(job number, JobReturn)` is called as each job ends. Used by the
        Optuna sweeper to ask for a trial only when a device is free for it."""
        from hydra_plugins.pipeline_gpu_launcher import _core

        _core.launch_stream(self, next_job, on_return, max_jobs=max_jobs)
