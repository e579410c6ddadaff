"""The backend contract (pipeline.testing.backend_contract) on the engine's backends: in the driver,
worker processes, Ray tasks."""

import pytest

from pipeline.testing.backend_contract import BackendContract, contract_data  # noqa: F401  (the suite's data)


def _checked(schema, **values):
    """The executor settings `values`, checked as a run checks them."""
    from pipeline.config_checks import check_executor

    conf = schema(**values)
    check_executor(conf)
    return conf


class TestInProcess(BackendContract):
    fits_in_driver = True
    sees_only_its_devices = False

    @pytest.fixture
    def make_backend(self):
        from pipeline.executors.local import InProcessBackend

        return lambda plan, run_dir: InProcessBackend()

    def never_given_a_time_limit(self):
        """A time limit needs fits that can be stopped: the local executor then never fits in the driver,
        and in_process=always with a limit is refused."""
        from pipeline.config import ExecutorConf
        from pipeline.errors import ConfigError
        from pipeline.executors import local_backend
        from pipeline.executors.local import InProcessBackend
        from pipeline.testing.backend_contract import plan_for

        single_slot = plan_for("prior", num_folds=1, cpus=1)
        # without a limit, a plan of one slot fits in the driver
        assert isinstance(local_backend(ExecutorConf(), single_slot, None), InProcessBackend)
        limited = ExecutorConf(task_timeout_s=2)
        assert not isinstance(local_backend(limited, single_slot, None), InProcessBackend)
        with pytest.raises(ConfigError, match="in_process=always"):
            _checked(ExecutorConf, in_process="always", task_timeout_s=2)


class TestProcesses(BackendContract):
    @pytest.fixture
    def make_backend(self):
        from pipeline.executors.local import ProcessBackend

        return lambda plan, run_dir: ProcessBackend(plan.hardware, run_dir)


@pytest.mark.slow
class TestRay(BackendContract):
    runs_declared_gpus = False  # Ray places GPU tasks on GPUs it has (a GPU-less cluster: HardwareError)
    owns_its_workers = False  # Ray's worker pool outlives a backend connected to a running instance

    @pytest.fixture
    def make_backend(self, ray_instance):
        from pipeline.executors.ray import RayBackend

        return lambda plan, run_dir: RayBackend()
