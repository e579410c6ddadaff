"""Typed errors a user can cause. The CLI prints their message without a traceback."""

from __future__ import annotations


class PipelineError(Exception):
    """Base of every error the user can fix: bad config, data, hardware or environment."""

    exit_code = 2


class ConfigError(PipelineError):
    """A config value is invalid; the message names the key, the value and what is valid."""


class ResourceError(ConfigError):
    """The resource hierarchy (hardware >= bag >= fit) is violated or cannot be satisfied."""


class TimeLimitError(ConfigError):
    """Nothing finished within time_limit_s: there is no model to put on a leaderboard."""


class HardwareError(PipelineError):
    """The machine lacks what the config asks for (GPUs, a GPU build of a library)."""


class DataError(PipelineError):
    """The data cannot be loaded or does not fit the task (missing file, label, bad column)."""


class TrackingError(PipelineError):
    """The tracking backend (MLflow) cannot be reached or refuses a write."""


class ModelOutputError(PipelineError):
    """Fitted models returned unusable predictions (NaN everywhere)."""

    exit_code = 1


class TaskFailedError(PipelineError):
    """A task of the plan still failed after its retries."""

    exit_code = 1


class Interrupted(BaseException):
    """The run was stopped by a signal; finished tasks stay on disk for a resume.

    A BaseException, as KeyboardInterrupt is: no `except Exception` (in a reader, a tracker call,
    a library) may swallow a stop signal. The CLI prints its message like a PipelineError's.
    """

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


def closest(name: str, options) -> str:
    """' (did you mean X?)' for the closest of options, or '' when nothing is close."""
    import difflib

    match = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""
