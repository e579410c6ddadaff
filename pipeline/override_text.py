"""A command-line override read as text, before Hydra parses it: its key and its value. Light (no imports),
so that the start-up path, the settings and the tracking names share one reading."""

from __future__ import annotations


def override_parts(override: str) -> tuple[str, str]:
    """`+model.nn.params.max_epochs=500` -> ("model.nn.params.max_epochs", "500"); `~model.nn` -> ("model.nn",
    ""): the key without Hydra's add, force-add and delete prefixes (`+`, `++`, `~`)."""
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def override_key(override: str) -> str:
    """`+model.x.params.y=1` -> `model.x.params.y`."""
    return override_parts(override)[0]


def key_path(override: str) -> list[str]:
    """`+model.nn.params.max_epochs=500` -> ["model", "nn", "params", "max_epochs"]."""
    return override_key(override).split(".")
