"""Where a job runs and what its command line (or the configs it named) chose: read from Hydra once, in the
composition root (pipeline.run)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional


@dataclass(frozen=True)
class Runtime:
    """Where a job runs: its Hydra output directory, the launch directory, its overrides (as its name
    shows them: secrets masked, tracking.* and hydra.* left out) and, in a sweep, the keys it varies.
    `chosen`: `group=option` for each config group whose option is not conf/config.yaml's default, however
    it was chosen (the command line, or an experiment config's `override /model: gbm`)."""

    run_dir: Path
    launch_dir: Path
    overrides: tuple[str, ...] = ()
    job_num: Optional[int] = None
    sweep_dir: Optional[Path] = None  # a job of a multirun: the sweep's directory (absolute)
    swept: tuple[str, ...] = ()  # the keys the sweep varies, in its order
    started: Optional[float] = None  # time.time() the run started (time_limit_s counts from it); None: now
    chosen: tuple[str, ...] = ()

    @property
    def choices(self) -> tuple[str, ...]:
        """What the user chose, for the rules that apply only where a group was left to the engine
        (pipeline.settings.overridden): the overrides, then the groups chosen away from their default."""
        return (*self.overrides, *self.chosen)

    @classmethod
    def from_hydra(cls) -> "Runtime":
        from hydra.core.hydra_config import HydraConfig

        from pipeline.tracking import naming
        from pipeline.tracking.sweep import sweep_directory, sweep_overrides

        h = HydraConfig.get()
        shown = tuple(naming.shown_overrides(h.overrides.task))
        chosen = chosen_groups(h.runtime.choices)
        if h.mode.name != "MULTIRUN":
            return cls(Path(h.runtime.output_dir), Path(h.runtime.cwd), shown, chosen=chosen)
        sweep = sweep_directory(Path(h.runtime.cwd), h.sweep.dir)
        params = h.sweeper.get("params") if "sweeper" in h else None
        swept = naming.swept_keys(sweep_overrides(sweep), params)
        return cls(Path(h.runtime.output_dir), Path(h.runtime.cwd), shown, h.job.get("num"), sweep,
                   tuple(swept), chosen=chosen)


def chosen_groups(choices: Mapping[str, object]) -> tuple[str, ...]:
    """`group=option` for each of Hydra's runtime choices (every group composed, whoever chose it) that is
    not the packaged default of conf/config.yaml, Hydra's own groups (`hydra/...`) left out; `group=[...]`
    for a default group chosen as a list."""
    defaults = packaged_defaults()
    changed = tuple(f"{group}={option}" for group, option in choices.items()
                    if not str(group).startswith("hydra/") and option != defaults.get(group))
    # a group chosen as a list of options (`model=[lightgbm,nn]`) is not among Hydra's choices
    listed = tuple(f"{group}=[...]" for group in defaults if group not in choices)
    return changed + listed


def packaged_defaults() -> dict[str, str]:
    """conf/config.yaml's defaults list as {group: option} (its schema and `_self_` left out)."""
    from omegaconf import OmegaConf

    from pipeline.config import CONFIG_DIR

    listed = OmegaConf.load(Path(CONFIG_DIR) / "config.yaml").get("defaults", [])
    return {str(k): v for entry in listed if not isinstance(entry, str) for k, v in entry.items()}
