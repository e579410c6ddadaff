"""`python -m pipeline [overrides]`: Hydra composes conf/, then pipeline.run.run does the work."""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline import run_clock

run_clock.note_machine()  # before the imports: how busy the machine is gets measured over the start-up

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from pipeline.config import CONFIG_DIR  # noqa: E402  # importing it registers the schemas in Hydra's ConfigStore


def _mode_from_command_line(self, config_name, overrides):
    """Hydra composes the whole config once only to read `hydra.mode`, then composes it again to run
    (hydra-ecosystem/hydra#3440: a fifth of a dry run). This project's configs never set
    `hydra.mode`, so it comes from the command line: `hydra.mode=MULTIRUN`, or `-m`, which Hydra reads
    itself when the mode is unset (None)."""
    from hydra.types import RunMode

    from pipeline.override_text import override_parts

    for override in overrides:
        key, value = override_parts(override)
        if key == "hydra.mode":
            return RunMode.__members__.get(value.strip().upper())  # an unknown name: the real compose says so
    return None


def _compose_once() -> None:
    from hydra._internal.hydra import Hydra

    if callable(getattr(Hydra, "get_mode", None)):  # Hydra 1.2-1.3; a Hydra without it needs nothing
        Hydra.get_mode = _mode_from_command_line


_compose_once()


def main():
    """`python -m pipeline [overrides]`: the overrides checked for keys that once named a component,
    then Hydra composes the config and runs it. Nothing it creates is writable by group or others,
    whatever the umask (pipeline.run_folder)."""
    from pipeline.run_folder import close_umask

    close_umask()
    refuse_former_keys(sys.argv[1:])
    return _composed_main()


@hydra.main(version_base=None, config_path=CONFIG_DIR, config_name="config")
def _composed_main(cfg: DictConfig):
    from pipeline.errors import Interrupted, PipelineError
    from pipeline.run import run

    try:
        return run(cfg)
    except (PipelineError, Interrupted) as exc:  # later stop signals are ignored (pipeline.signals)
        from pipeline.report import exit_with_error

        exit_with_error(exc)


def refuse_former_keys(argv: list[str]) -> None:
    """Exit with a ConfigError's message and code when an override names a component the old way
    (`executor.name=ray`: now `executor=ray`), before Hydra composes."""
    from pipeline.errors import ConfigError
    from pipeline.targets import check_overrides

    try:
        check_overrides(argv, Path(CONFIG_DIR))
    except ConfigError as exc:
        from pipeline.report import exit_with_error

        exit_with_error(exc)


def entry() -> None:
    """The `tabular-pipeline` console script."""
    from pipeline.exiting import exit_quickly

    try:
        main()
    finally:
        exit_quickly()


if __name__ == "__main__":
    entry()
