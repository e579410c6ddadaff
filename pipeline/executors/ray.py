"""The Ray executor: each fit of the plan is a Ray task with the plan's num_cpus and num_gpus.

`executor.address=null` starts a local Ray instance limited to the plan's hardware; "auto" or
"ray://host:port" joins a running cluster, whose workers must be able to import `pipeline` (and
any user model classes). Ray places the tasks and sets CUDA_VISIBLE_DEVICES itself; the
scheduler still decides what starts when, retries and bags, exactly as with the local executor.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Optional

from pipeline.accelerators import cuda as devices
from pipeline.errors import ConfigError, HardwareError
from pipeline.graph.backend import Backend
from pipeline.graph.tasks import DataRef, FitRequest, FoldResult, TaskFailure, safe_run_fit
from pipeline.executors.worker import environment
from pipeline.hardware import Machine
from pipeline.lean_imports import PRELOAD as LEAN_PRELOAD
from pipeline.lean_imports import install as install_lean_imports
from pipeline.graph.plan import Plan
from pipeline.quantities import fmt

log = logging.getLogger(__name__)

INSTALL_HINT = "executor=ray needs Ray: pip install '.[ray]' (or pip install 'tabular-pipeline[ray]')"
AUTH_ENV = "RAY_AUTH_MODE"
WAIT_SLICE_S = 0.5  # a blocking ray.wait runs no signal handlers: wait in slices so SIGTERM/SIGINT stop a run


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return ray


def _plain(value: Any) -> Any:
    """ray.init arguments as plain Python (executor.ray_init arrives as OmegaConf containers)."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _init(ray, kwargs: dict, user: dict, joining: bool) -> None:
    """ray.init, with its errors as ConfigError and the driver's SIGTERM handler kept.

    ray.init replaces the SIGTERM handler with sys.exit; the engine's own handler marks the run
    KILLED and keeps finished tasks for a resume, so it is put back.
    """
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        ray.init(**kwargs)
    except (ConnectionError, TimeoutError) as exc:
        raise ConfigError(f"executor.address={kwargs.get('address')!r}: cannot connect to a Ray cluster: {exc}") from None
    except (TypeError, ValueError, RuntimeError) as exc:
        where = f"executor.address={kwargs.get('address')!r}" if joining else "a local Ray instance"
        raise ConfigError(f"ray.init failed for {where} with executor.ray_init={user}: {exc}") from None
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _join(ray, address: str, init_kwargs: dict) -> None:
    """Connect this driver to the cluster at `address`, unless Ray is connected already."""
    if not ray.is_initialized():
        user = _plain(init_kwargs)
        kwargs = {"address": address, "log_to_driver": False, "logging_level": logging.WARNING, **user}
        _init(ray, kwargs, user, joining=True)


def _nodes(ray) -> list[tuple[float, float, dict]]:
    """(CPUs, GPUs, resources) of each alive node of the connected cluster."""
    out = []
    for node in ray.nodes():
        if node.get("Alive", node.get("alive", False)):
            res = node.get("Resources", {}) or {}
            out.append((float(res.get("CPU", 0)), float(res.get("GPU", 0)), res))
    return out


@dataclass(frozen=True)
class ClusterView:
    """What planning learns from one look at a Ray cluster: its totals, and each alive node's
    (CPUs, GPUs), against which every planned fit is checked before the run starts."""

    address: str
    machine: Machine
    nodes: tuple[tuple[float, float], ...]

    def check(self, plan: Plan) -> None:
        """Every fit must fit on one alive node: Ray would otherwise keep it pending forever."""
        check_fits_on_nodes(plan, self.nodes, f"executor.address={self.address!r}")


def look_at_cluster(address: str, init_kwargs: dict) -> ClusterView:
    """The Ray cluster at `address`: its alive nodes, for the plan's total and the per-node check.

    Uses this process's connection if it has one; otherwise joins the cluster for the look and
    disconnects again, so planning leaves no connection behind (the RayBackend joins when the run starts).
    """
    ray = _import_ray()
    if ray.is_initialized():
        return _view(ray, address)
    _join(ray, address, init_kwargs)
    try:
        return _view(ray, address)
    finally:
        ray.shutdown()


def _view(ray, address: str) -> ClusterView:
    nodes = _nodes(ray)
    cpus, tokens, names = 0, [], []
    for node_cpus, node_gpus, res in nodes:
        cpus += int(node_cpus)
        kinds = [k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")]
        for _ in range(int(node_gpus)):
            tokens.append(str(len(tokens)))
            names.append(kinds[0] if kinds else "GPU")
    if cpus < 1:
        raise HardwareError(f"the Ray cluster at executor.address={address!r} has no CPUs on an alive node")
    machine = Machine(cpus, tuple(tokens), tuple(names), (0,) * len(tokens))
    return ClusterView(address, machine, tuple((c, g) for c, g, _ in nodes))


def check_fits_on_nodes(plan: Plan, nodes: tuple[tuple[float, float], ...], where: str) -> None:
    """A HardwareError naming the first fit of the plan that no single node of `nodes` can hold."""
    too_big = Counter()
    first = {}
    unlisted = {a.model: plan.unlisted(a.model) * a.num_folds for a in plan.allocations}  # a trial's shape
    for task in plan.fit_tasks:
        cpus, gpus = task.resources.num_cpus, float(task.resources.num_gpus)
        if not any(c >= cpus and g >= gpus - 1e-9 for c, g in nodes):
            key = (cpus, task.resources.num_gpus)
            too_big[key] += 1 + (unlisted.pop(task.model, 0) if task.fold_set is None else 0)
            first.setdefault(key, task.id)
    if not too_big:
        return
    cpus, gpus = next(iter(too_big))
    others = sum(too_big.values()) - 1
    largest = max(nodes, key=lambda n: (n[1], n[0]), default=(0.0, 0.0))
    raise HardwareError(
        f"task {first[(cpus, gpus)]} asks for {cpus} CPU / {fmt(gpus)} GPU"
        + (f" (and {others} more fit(s) too large)" if others else "")
        + f", but {where} has {fmt(sum(c for c, _ in nodes))} CPU / {fmt(sum(g for _, g in nodes))} GPU over "
        f"{len(nodes)} node(s), the largest node {fmt(largest[0])} CPU / {fmt(largest[1])} GPU; a Ray task must fit "
        "on one node. Lower parallelism.fit (or the model's resources), or give the cluster a node that large"
    )


def _gpu_amount(request: FitRequest) -> float:
    # Ray keeps resource amounts to 1e-4; rounding down keeps e.g. three 1/3 shares within one GPU.
    total = sum(request.gpu_shares, Fraction(0))
    return math.floor(total * 10_000) / 10_000


def _as_id(value) -> int | str:
    try:
        return int(value)
    except (TypeError, ValueError):
        return str(value)


def _fit_in_worker(request: FitRequest, data, lean: bool = False) -> FoldResult | TaskFailure:
    """The body of each Ray task. `data` arrives resolved because it is a top-level argument. `lean`: the
    run imports the model libraries without scikit-learn (pipeline.lean_imports), here too."""
    import ray

    if lean:
        install_lean_imports()
    devices.pin_order()  # before the fit's library starts CUDA in this worker
    request.data = DataRef(obj=data)
    if request.gpu_shares:
        # Ray has set CUDA_VISIBLE_DEVICES to the ids it assigned; the fit sees them from ordinal 0.
        tokens, request.local_gpus = devices.ray_task_devices(ray.get_gpu_ids())
        request.gpu_ids = tuple(_as_id(t) for t in tokens)
    else:
        request.local_gpus = ()
    result = safe_run_fit(request)
    if isinstance(result, FoldResult):
        result.node = ray.get_runtime_context().get_node_id()
    return result


def _fit_in_gpu_worker(request: FitRequest, data, lean: bool = False) -> FoldResult | TaskFailure:
    """_fit_in_worker for GPU fits, registered with max_calls=1: the worker exits after one fit,
    which releases the GPU memory its framework kept cached."""
    return _fit_in_worker(request, data, lean)


@contextmanager
def _unwrap_signal_errors():
    """Re-raise what a signal handler raised while Ray blocked.

    Ray runs the driver's signal handlers inside ray.wait/ray.get and wraps what they raise (the
    engine's Interrupted on SIGTERM, KeyboardInterrupt) in a SystemError.
    """
    try:
        yield
    except SystemError as exc:
        cause = exc.__cause__ or exc.__context__
        if cause is not None and not isinstance(cause, SystemError):
            raise cause from None
        raise


def _failure(task_id: str, exc: BaseException) -> TaskFailure:
    """A Ray error of one task as a TaskFailure the scheduler retries."""
    import ray.exceptions as rex

    died = tuple(
        getattr(rex, n)
        for n in ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "OutOfMemoryError", "ActorDiedError")
        if hasattr(rex, n)
    )
    first = (str(exc).strip().splitlines() or [""])[0]
    if isinstance(exc, died):
        message = f"the Ray worker process died during the fit ({type(exc).__name__}: {first})"
    elif isinstance(exc, rex.TaskCancelledError):
        message = "the Ray task was cancelled"
    elif isinstance(exc, rex.RayTaskError):
        cause = getattr(exc, "cause", None)
        message = f"{type(cause).__name__}: {cause}" if cause is not None else f"the Ray task raised: {first}"
    else:
        message = f"Ray could not run the fit ({type(exc).__name__}: {first})"
    return TaskFailure(task_id, message, str(exc))


class RayBackend(Backend):
    """Fits as Ray tasks: `num_cpus`/`num_gpus` from the plan, the data put in the object store once.

    Uses Ray when this process is already connected; otherwise joins `address`, or starts a local
    instance with the plan's CPUs and GPUs (and stops it again at shutdown).
    """

    name = "ray"

    def __init__(self, address: Optional[str] = None, init_kwargs: Optional[dict] = None,
                 preload: tuple[str, ...] = ()):
        self.address, self.init_kwargs = address, dict(init_kwargs or {})
        self.lean = LEAN_PRELOAD in preload  # Ray's workers import what a fit needs themselves, lean or not
        self.started = False  # this backend started a local instance, so it stops it
        self.plan_ids: dict[str, int] = {}  # a local instance's CUDA token -> the plan's device id
        self.running: dict[object, str] = {}  # object ref -> task id
        self.data_ref = None
        self._remote = self._remote_gpu = None

    def start(self, plan: Plan) -> None:
        """Connect (or start the local instance) while the driver still loads the data."""
        self._connect(_import_ray(), plan)

    def prepare(self, plan: Plan, data) -> DataRef:
        ray = _import_ray()
        self._connect(ray, plan)
        if not self.started and not self.address:  # a connection this process already had: planning did not look
            check_fits_on_nodes(plan, tuple((c, g) for c, g, _ in _nodes(ray)), "the connected Ray instance")
        self.data_ref = ray.put(data)
        self._remote = ray.remote(_fit_in_worker)
        self._remote_gpu = ray.remote(max_calls=1)(_fit_in_gpu_worker)  # max_calls is no .options() key
        return DataRef(obj=self.data_ref)

    def _connect(self, ray, plan: Plan) -> None:
        if ray.is_initialized():
            return
        if self.address:
            _join(ray, self.address, self.init_kwargs)
            return
        # A fresh local instance would otherwise switch on token auth and write ~/.ray/auth_token.
        os.environ.setdefault(AUTH_ENV, "disabled")
        user = _plain(self.init_kwargs)
        kwargs = {
            "address": "local",  # never attach to some other local cluster by accident
            "num_cpus": plan.hardware.num_cpus,
            "num_gpus": math.ceil(plan.hardware.num_gpus),
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.WARNING,
            **user,
        }
        # The instance takes its GPU ids from CUDA_VISIBLE_DEVICES: show it the plan's devices only
        # (hardware.devices may pick, say, GPUs 2 and 3 of four).
        shown = {devices.VISIBLE: plan.hardware.visible_devices(plan.hardware.devices)} if plan.hardware.devices else {}
        with environment(shown):
            _init(ray, kwargs, user, joining=False)
        self.started = True
        self.plan_ids = {t: d for d, t in zip(plan.hardware.devices, plan.hardware.tokens)}

    def submit(self, request: FitRequest):
        if self._remote is None:
            raise RuntimeError("RayBackend.submit before prepare")
        gpus = _gpu_amount(request)
        remote = self._remote_gpu if gpus > 0 else self._remote
        options = {"num_cpus": request.num_cpus, "num_gpus": gpus, "max_retries": 0}  # the scheduler retries
        # The data ref travels as a top-level argument: Ray resolves only those, not refs inside the request.
        ref = remote.options(**options).remote(replace(request, data=DataRef()), self.data_ref, self.lean)
        self.running[ref] = request.task_id
        return ref

    def wait(self, handles, timeout: Optional[float] = None):
        import ray

        if not handles:
            return []
        deadline = None if timeout is None else time.monotonic() + timeout
        ready: list = []
        with _unwrap_signal_errors():
            while True:
                left = WAIT_SLICE_S if deadline is None else min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))
                ready, _ = ray.wait(list(handles), num_returns=1, timeout=left)
                if ready or (deadline is not None and time.monotonic() >= deadline):
                    break
            if ready:
                ready, _ = ray.wait(list(handles), num_returns=len(handles), timeout=0)
        out = []
        for ref in ready:
            task_id = self.running.pop(ref, "")
            try:
                with _unwrap_signal_errors():
                    result = ray.get(ref)
            except ray.exceptions.RayError as exc:  # a crashed worker or node: a failed task, which is retried
                result = _failure(task_id, exc)
            if isinstance(result, FoldResult) and self.plan_ids:
                # Ray reports CUDA ids; the timeline and tags use the plan's device ids, as with executor=local.
                result.gpu_ids = tuple(self.plan_ids.get(str(i), i) for i in result.gpu_ids)
            out.append((ref, result))
        return out

    def cancel(self, handle) -> None:
        """Force-cancel a running fit's task (Ray kills its worker process)."""
        import ray

        self.running.pop(handle, None)
        try:
            ray.cancel(handle, force=True)
        except Exception as exc:  # finished meanwhile, or a client that cannot force
            log.warning("could not cancel a Ray task past executor.task_timeout_s: %s", exc)

    def shutdown(self) -> None:
        try:
            import ray
        except ImportError:
            return
        if ray.is_initialized():
            for ref in self.running:  # a run that stops early: stop its fits at once
                try:
                    ray.cancel(ref, force=True)
                except Exception as exc:  # already finished, or a client that cannot force
                    log.debug("could not cancel a Ray task: %s", exc)
        self.running.clear()
        self.data_ref = None
        self._remote = self._remote_gpu = None
        self.plan_ids = {}
        if self.started:
            ray.shutdown()
            self.started = False
