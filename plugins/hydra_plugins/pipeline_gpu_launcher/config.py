"""The launcher's config schema, registered as `hydra/launcher=gpu`; the launcher reads its options as it."""

from dataclasses import dataclass
from fractions import Fraction
from typing import List, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class GpuLauncherConf:
    """Options of `hydra/launcher=gpu`."""

    _target_: str = "hydra_plugins.pipeline_gpu_launcher.gpu_launcher.GpuLauncher"
    # GPUs per job: a share below 1 packs several jobs on one device (0.5: two per GPU);
    # a whole number gives each job that many whole devices; 0 runs jobs on CPUs only.
    gpus_per_job: float = 1.0
    # CPUs per job; null: this machine's CPUs divided evenly among the jobs that run at once.
    cpus_per_job: Optional[int] = None
    # At most this many jobs at once; null: as many as the GPU slots (or CPUs) allow.
    n_jobs: Optional[int] = None
    # Visible CUDA device ids the jobs may use; null: all of them.
    devices: Optional[List[int]] = None

    @property
    def gpus(self) -> Fraction:
        """`gpus_per_job` as an exact share, once `check()` has passed."""
        from pipeline.quantities import gpu_amount

        return gpu_amount(self.gpus_per_job, "hydra.launcher.gpus_per_job")

    def check(self) -> "GpuLauncherConf":
        """Raise LauncherConfigError for an option that is invalid on any machine; returns self."""
        from hydra_plugins.pipeline_gpu_launcher._errors import LauncherConfigError
        from pipeline.errors import ConfigError
        from pipeline.quantities import cpu_count, gpu_amount

        try:
            gpus = gpu_amount(self.gpus_per_job, "hydra.launcher.gpus_per_job")
            if self.cpus_per_job is not None:
                cpu_count(self.cpus_per_job, "hydra.launcher.cpus_per_job")
        except ConfigError as exc:
            raise LauncherConfigError(str(exc)) from None
        n_jobs = self.n_jobs
        if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1):
            raise LauncherConfigError(
                f"hydra.launcher.n_jobs={n_jobs!r}: give the most jobs to run at once, an integer >= 1, "
                "or null for as many as the slots allow"
            )
        if self.devices is not None:
            ids = list(self.devices)
            if not ids or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in ids):
                raise LauncherConfigError(
                    f"hydra.launcher.devices={ids!r}: give a list of CUDA device ids such as [0, 1], "
                    "or null for every visible device"
                )
            if len(set(ids)) != len(ids):
                dup = sorted({i for i in ids if ids.count(i) > 1})
                raise LauncherConfigError(f"hydra.launcher.devices={ids!r}: device ids must be unique; {dup} repeats")
            if gpus == 0:
                raise LauncherConfigError(
                    f"hydra.launcher.devices={ids!r} is set but hydra.launcher.gpus_per_job=0 gives jobs no GPU; "
                    "set gpus_per_job (1, or a share such as 0.5) or leave devices null"
                )
        return self


ConfigStore.instance().store(group="hydra/launcher", name="gpu", node=GpuLauncherConf, provider="pipeline")
