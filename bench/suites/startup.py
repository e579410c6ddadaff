"""Wall seconds of `python -m pipeline --help` and of a dry-run plan, each a fresh subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.common import Options, figure, log, timed

TARGET = ("<=", 1.5)
COMMANDS = {
    "python -m pipeline --help": ["--help"],
    "python -m pipeline +hardware=4gpu model=all dry_run=true tracking=none":
        ["+hardware=4gpu", "model=all", "dry_run=true", "tracking=none"],
}


def run(opts: Options) -> dict:
    n = opts.n(10, 3)
    cwd = opts.scratch / "startup"
    cwd.mkdir(parents=True, exist_ok=True)  # the dry run writes outputs/ here
    env = {**os.environ, "COLUMNS": "200"}
    figures = []
    for label, args in COMMANDS.items():
        cmd = [sys.executable, "-m", "pipeline", *args]
        _call(cmd, cwd, env)  # warm the file cache; not timed
        seconds = []
        for r in range(n):
            log(f"startup: {label} {r + 1}/{n}")
            sec, _ = timed(lambda: _call(cmd, cwd, env))
            seconds.append(sec)
        figures.append(figure(label, seconds, "s", group="startup", target=TARGET))
    return {
        "settings": {"repeats": n, "python": sys.executable, "cwd": "a scratch folder",
                     "timer": "subprocess.run from start to exit; one untimed run of each command first"},
        "figures": figures,
        "notes": [],
    }


def _call(cmd, cwd, env) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} exited {proc.returncode}: {proc.stderr[-2000:]}")
