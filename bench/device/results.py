"""A step's results on the box, written as they are complete and read back by the call however the step
ends: one JSON line each, {"figures": [...]}, {"settings": {...}} or {"error": "..."}."""

from __future__ import annotations

import json
from pathlib import Path


class Lines:
    """Appends a step's results to `path`, one record a line, each as soon as it is complete."""

    def __init__(self, path: Path):
        self.path = path

    def figures(self, figures: list[dict]) -> None:
        self._write({"figures": figures})

    def settings(self, **settings) -> None:
        self._write({"settings": settings})

    def error(self, text: str) -> None:
        self._write({"error": text})

    def _write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record, default=str) + "\n")


def read_lines(path: Path) -> tuple[list[dict], dict, str | None]:
    """The figures, settings and error a step wrote; a line cut short by a kill is left out."""
    figures, settings, error = [], {}, None
    try:
        text = path.read_text()
    except FileNotFoundError:
        return figures, settings, error
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        figures += record.get("figures", [])
        settings.update(record.get("settings", {}))
        error = record.get("error", error)
    return figures, settings, error
