"""Leaving a process quickly: the interpreter's teardown would traverse every object the libraries
loaded (a third of a second after a short run) only to free memory the OS takes back."""

from __future__ import annotations


def exit_quickly() -> None:
    """Exempt every object from the garbage collector, so the teardown's last collection skips what
    the libraries loaded; call it last, just before the process exits.

    No collection runs first: a full one walks those same objects (50 ms after a LightGBM run). What
    must happen at exit does not wait on the collector: files are closed where they are written, and
    atexit handlers (logging, multiprocessing, weakref finalizers) still run.
    """
    import gc

    gc.freeze()
