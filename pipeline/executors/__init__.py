"""Executors run a Plan; they never read config. `local` is the embedded default, `ray` scales out.

An executor is named by `executor._target_` (conf/executor/local.yaml names `local_backend`,
ray.yaml `ray_backend`). The composition root calls the target with keyword arguments `conf` (the
typed `executor` settings), `plan`, `run_dir` and `preload` (the model libraries workers import
early), once every check has passed; it must return a `pipeline.graph.backend.Backend`: a class of
it, or a function that says so (`-> Backend`). Its `kind`
attribute, where it has one, tells the run what it is; `cluster(conf)`, where it has one, looks at the
nodes the fits run on (their totals for the plan, a check of every fit against them) and
`joins_cluster(conf)` says whether it would, without looking.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.graph.backend import Backend  # what the targets return: the target kind check reads it


def local_backend(conf, plan, run_dir: Path, preload: tuple[str, ...] = ()) -> Backend:
    """Worker processes on this machine, or the driver itself when one slot covers the plan."""
    from pipeline.executors.local import make_local_backend

    # A time limit needs fits that can be stopped: worker processes, not the driver.
    in_process = "never" if conf.task_timeout_s is not None and conf.in_process == "auto" else conf.in_process
    return make_local_backend(in_process, plan, run_dir, preload)


local_backend.kind = "local"


def ray_backend(conf, plan, run_dir: Path, preload: tuple[str, ...] = ()) -> Backend:
    """Ray tasks, on a local instance or the cluster at `executor.address`."""
    from pipeline.executors.ray import RayBackend

    return RayBackend(address=conf.address, init_kwargs=conf.ray_init, preload=preload)


def ray_cluster(conf):
    """The Ray cluster at `executor.address` (its nodes, looked at once and let go), which the fits run on;
    None without an address: a local Ray instance runs them on this machine."""
    if not conf.address:
        return None
    from pipeline.executors.ray import look_at_cluster

    return look_at_cluster(conf.address, conf.ray_init)


ray_backend.kind = "ray"
ray_backend.cluster = ray_cluster
ray_backend.joins_cluster = lambda conf: bool(conf.address)
