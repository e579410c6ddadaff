"""Lines a run says once however many fits reach them: a search fits hundreds of folds, and a choice or a
library's complaint that each of them meets is one fact for the user, not hundreds of lines."""

from __future__ import annotations

import logging

from pipeline import run_clock

_said: set[tuple] = set()  # (run, logger, key) said in this process


def say_once(log: logging.Logger, key: tuple, message: str, *args, level: int = logging.INFO) -> None:
    """Log `message % args` on `log` unless this run (`run_clock.run_number`: a sweep's jobs share a process)
    has already said one under `key`."""
    said = (run_clock.run_number(), log.name, key)
    if said not in _said:
        _said.add(said)
        log.log(level, message, *args)
