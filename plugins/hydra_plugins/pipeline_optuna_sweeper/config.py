"""Config schemas: `hydra/sweeper=optuna` and its samplers `hydra/sweeper/sampler=tpe|random|grid`."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf


@dataclass
class TPESamplerConf:
    """Optuna's TPESampler: random for the first n_startup_trials, then model-based."""

    name: str = "tpe"
    seed: Optional[int] = None
    n_startup_trials: int = 10
    multivariate: bool = False


@dataclass
class RandomSamplerConf:
    """Optuna's RandomSampler."""

    name: str = "random"
    seed: Optional[int] = None


@dataclass
class GridSamplerConf:
    """Optuna's GridSampler over every combination of the (discrete) params."""

    name: str = "grid"
    seed: Optional[int] = None


@dataclass
class OptunaSweeperConf:
    """Options of `hydra/sweeper=optuna`."""

    _target_: str = "hydra_plugins.pipeline_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    defaults: List[Any] = field(default_factory=lambda: [{"sampler": "tpe"}])
    sampler: Any = MISSING
    # maximize or minimize the job's return value (the pipeline returns the best validation score:
    # maximize roc_auc or accuracy, minimize rmse); no default, so a sweep never optimises backwards.
    # A list, one per value the job returns, searches several objectives: [maximize, minimize].
    direction: Any = None
    n_trials: int = 20
    # Trials running at once (async) or per launcher batch (batch).
    n_jobs: int = 2
    # async: a new trial starts as soon as a slot of hydra/launcher=gpu frees; batch: n_jobs trials
    # per launch, each batch waiting for its slowest job (always so with other launchers).
    schedule: str = "async"
    storage: Optional[str] = None  # e.g. sqlite:///optuna.db to keep and resume the study
    study_name: Optional[str] = None
    # Stop when more than this fraction of the trials so far failed (0.0: at the first failure).
    max_failure_rate: float = 0.0
    # key -> Hydra override grammar: interval(0.01, 0.3), tag(log, interval(...)), int(interval(8, 64)),
    # range(1, 10), choice(a, b), a,b,c. Dotted keys may also be nested.
    params: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Built by the sweeper from its options: every option checked (messages name the key, the value and
        what is valid); sampler and direction become plain values, params a flat dotted-key mapping."""
        from hydra_plugins.pipeline_optuna_sweeper._settings import check

        check(self)

    @property
    def sampler_name(self) -> str:
        return self.sampler["name"]

    @property
    def seed(self) -> Optional[int]:
        return self.sampler.get("seed")

    @property
    def sampler_options(self) -> dict:
        """The sampler's own keyword arguments (name and seed aside)."""
        return {k: v for k, v in self.sampler.items() if k not in ("name", "seed")}

    @property
    def directions(self) -> tuple:
        """One direction per objective the job returns."""
        return tuple(self.direction) if isinstance(self.direction, (list, tuple)) else (self.direction,)

    @property
    def multi_objective(self) -> bool:
        return len(self.directions) > 1

    @property
    def direction_text(self) -> str:
        return self.directions[0] if len(self.directions) == 1 else f"[{', '.join(self.directions)}]"


def _sweeper_node():
    node = OmegaConf.structured(OptunaSweeperConf)
    # An open dict, so `hydra.sweeper.params.model.lightgbm.params.lr=...` needs no leading +.
    OmegaConf.set_struct(node.params, False)
    return node


cs = ConfigStore.instance()
cs.store(group="hydra/sweeper", name="optuna", node=_sweeper_node(), provider="pipeline")
cs.store(group="hydra/sweeper/sampler", name="tpe", node=TPESamplerConf, provider="pipeline")
cs.store(group="hydra/sweeper/sampler", name="random", node=RandomSamplerConf, provider="pipeline")
cs.store(group="hydra/sweeper/sampler", name="grid", node=GridSamplerConf, provider="pipeline")
