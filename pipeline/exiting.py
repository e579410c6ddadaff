"""Leaving a process quickly: the interpreter's teardown would traverse every object the libraries
loaded (a third of a second after a short run) only to free memory the OS takes back."""

from __future__ import annotations


def exit_quickly() -> None:
    """Collect what was left behind (finalizers run now), then exempt every remaining object from
    the garbage collector; call it last, just before the process exits."""
    import gc

    gc.collect()
    gc.freeze()
