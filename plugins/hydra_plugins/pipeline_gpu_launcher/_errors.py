"""The launcher's config error, kept apart from config.py: plugin discovery imports config.py, and this
module imports the pipeline."""

from hydra.errors import CompactHydraException

from pipeline.errors import ConfigError


class LauncherConfigError(ConfigError, CompactHydraException):
    """A `hydra.launcher.*` value is invalid (printed without a traceback)."""
