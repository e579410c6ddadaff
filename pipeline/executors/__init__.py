"""Executors run a Plan; they never read config. `local` is the embedded default, `ray` scales out."""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import ConfigError, closest

EXECUTORS = ("local", "ray")


def make_backend(name: str, plan, data, run_dir: Path, *, in_process: str = "auto", address=None,
                 ray_init: dict | None = None):
    if name == "local":
        from pipeline.executors.local import make_local_backend

        return make_local_backend(in_process, plan, data, run_dir)
    if name == "ray":
        from pipeline.executors.ray import RayBackend

        return RayBackend(data, address=address, init_kwargs=ray_init or {})
    raise ConfigError(f"executor.name={name!r} is not one of {', '.join(EXECUTORS)}{closest(name, EXECUTORS)}")
