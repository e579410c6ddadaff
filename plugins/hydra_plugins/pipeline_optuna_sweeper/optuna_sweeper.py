"""The `hydra/sweeper=optuna` plugin class; the work is in `_impl`, imported only when a sweep runs."""

from __future__ import annotations

from typing import Any, List, Optional

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class OptunaSweeper(Sweeper):
    """Asks Optuna for trials, launches them, tells it their scores: a new trial as soon as a launcher slot
    frees (with `hydra/launcher=gpu`), else `n_jobs` trials per batch."""

    def __init__(self, **options: Any) -> None:
        # Hydra passes the options of OptunaSweeperConf (config.py), which checks them in setup().
        self.options = options
        self.settings = None
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.launcher = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins
        from hydra_plugins.pipeline_optuna_sweeper.config import OptunaSweeperConf

        self.settings = OptunaSweeperConf(**self.options)
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )

    def sweep(self, arguments: List[str]) -> Any:
        from hydra_plugins.pipeline_optuna_sweeper import _impl

        return _impl.sweep(self, arguments)
