"""The launcher's config schema, registered as `hydra/launcher=gpu`."""

from dataclasses import dataclass
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


ConfigStore.instance().store(group="hydra/launcher", name="gpu", node=GpuLauncherConf, provider="pipeline")
