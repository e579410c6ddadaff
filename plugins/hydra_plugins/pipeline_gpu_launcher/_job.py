"""The job side of `hydra/launcher=gpu`: a slot's worker process runs one sweep job after another.

The worker is warm: Hydra, the engine and the model libraries it imported for its first job serve
every later job of the sweep on its slot. Each job runs as Hydra's `run_job` runs it, in its own
job directory with its own logging, and starts from the worker's own environment.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Optional, Sequence

from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException


class JobFailedError(CompactHydraException):
    """A job ended without a return value: it exited, was killed, or its result could not be read."""


def shown_overrides(overrides: Sequence[str]) -> str:
    """A job's overrides as the log names it (Hydra's filter drops its own hydra.* keys)."""
    from hydra.core.utils import filter_overrides

    return " ".join(filter_overrides(overrides)) or "no overrides"


def failed_return(overrides: Sequence[str], error: BaseException) -> JobReturn:
    """A FAILED JobReturn carrying `error`, as `run_job` builds for a task that raised."""
    ret = JobReturn(overrides=list(overrides))
    ret.status = JobStatus.FAILED
    ret.return_value = error
    return ret


class JobServer:
    """What a slot's worker serves: a pickled (job config, job number, overrides) in, a pickled
    JobReturn out. `common` holds what every job of the sweep shares (Hydra's context, the task
    function, Hydra's singletons); it is unpickled once, by the first job."""

    def __init__(self, common: bytes):
        self.common = common
        self._loaded: Optional[tuple] = None

    def __call__(self, payload: bytes) -> bytes:
        import cloudpickle

        config, idx, overrides = cloudpickle.loads(payload)
        environment = dict(os.environ)
        try:
            return _dump_return(self._run(config, idx, overrides), idx, shown_overrides(overrides))
        finally:
            os.environ.clear()
            os.environ.update(environment)

    def _run(self, config, idx: int, overrides: list[str]) -> JobReturn:
        """Run the job as Hydra's `run_job` does; every way it can end becomes a JobReturn."""
        shown = shown_overrides(overrides)
        try:
            from hydra.core.hydra_config import HydraConfig
            from hydra.core.utils import run_job

            hydra_context, task_function = self._load()
            HydraConfig.instance().set_config(config)
            ret = run_job(
                hydra_context=hydra_context, task_function=task_function, config=config,
                job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir",
            )
            if ret.status == JobStatus.FAILED:
                # The exception crosses a process boundary without its traceback: show it here.
                error = ret._return_value
                print(f"job #{idx} ({shown}) failed:", file=sys.stderr)
                traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
        except SystemExit as exc:
            if exc.code in (None, 0):
                ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
            else:
                ret = failed_return(overrides, JobFailedError(
                    f"job #{idx} ({shown}) exited with code {exc.code}; its error is printed above"
                ))
        except BaseException as exc:  # KeyboardInterrupt, or a failure before the task started
            traceback.print_exc()
            ret = failed_return(overrides, JobFailedError(f"job #{idx} ({shown}) stopped: {type(exc).__name__}: {exc}"))
        sys.stdout.flush()
        sys.stderr.flush()
        return ret

    def _load(self) -> tuple:
        if self._loaded is None:
            import cloudpickle
            from hydra.core.singleton import Singleton
            from hydra.core.utils import setup_globals

            hydra_context, task_function, singleton_state = cloudpickle.loads(self.common)
            setup_globals()
            Singleton.set_state(singleton_state)
            self._loaded = (hydra_context, task_function)
        return self._loaded


def _dump_return(ret: JobReturn, idx: int, shown: str) -> bytes:
    import cloudpickle

    try:
        data = cloudpickle.dumps(ret)
        cloudpickle.loads(data)  # an exception whose __init__ takes other arguments fails only here
        return data
    except Exception as exc:
        value = ret._return_value
        if ret.status == JobStatus.FAILED:
            error = JobFailedError(f"job #{idx} ({shown}) failed: {type(value).__name__}: {value}")
        else:
            error = JobFailedError(
                f"job #{idx} ({shown}) returned a {type(value).__name__}, which cannot be sent back to the "
                f"launcher ({type(exc).__name__}: {exc})"
            )
        return cloudpickle.dumps(failed_return(ret.overrides or [], error))
