"""Executors run a Plan; they never read config. `local` is the embedded default, `ray` scales out."""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import ConfigError, closest

EXECUTORS = ("local", "ray")


def make_backend(name: str, plan, run_dir: Path, *, in_process: str = "auto", address=None,
                 ray_init: dict | None = None, preload: tuple[str, ...] = ()):
    """The executor's backend for this plan; `preload` names the model libraries workers import early."""
    if name == "local":
        from pipeline.executors.local import make_local_backend

        return make_local_backend(in_process, plan, run_dir, preload)
    if name == "ray":
        from pipeline.executors.ray import RayBackend

        return RayBackend(address=address, init_kwargs=ray_init or {})
    raise ConfigError(f"executor.name={name!r} is not one of {', '.join(EXECUTORS)}{closest(name, EXECUTORS)}")
