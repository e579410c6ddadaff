"""The data file worker processes read: the prepared data, shared through the page cache, not copied.

The driver pickles the data with protocol 5, its arrays out of band: they are written as they lie in
memory (no pickled copy of the table in the driver), each at an aligned offset after a small header.
A worker maps the file and unpickles the header over the mapping, so its arrays are read-only views
of the same pages every other worker maps: one copy of the table in memory however many workers
read it, and pages the kernel may drop and read again rather than swap.

Layout: pickle(fingerprint), pickle(index), then from the next ALIGN boundary the payload and the
buffers at the offsets the index gives (relative to that boundary).

The file is unpickled only after pipeline.trusted's checks (in the driver, which reads the fingerprint
of one already there, and in every worker); one that fails them stops the run with UntrustedFile.
"""

from __future__ import annotations

import mmap
import os
import pickle
from pathlib import Path
from typing import Any, Optional

from pipeline.trusted import UnsafeFile, create_file, make_folders, open_trusted

ALIGN = 64  # bytes: every array starts at a cache line (and any dtype's alignment)

_DATA_CACHE: dict[tuple, Any] = {}


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def write_data_file(path: Path, data) -> None:
    """Write the data for the workers; a file already there for the same fingerprint is kept, one
    written for other data (a run directory reused with other data settings) is replaced, atomically."""
    from pipeline.store import temporary_name

    if read_data_fingerprint(path) == data.fingerprint:
        return
    import dataclasses

    if getattr(data, "features", None) is not None:  # the encoders are the driver's: fits read X alone
        data = dataclasses.replace(data, features=None, raw_example=None)
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(data, protocol=5, buffer_callback=buffers.append)
    views = [b.raw() for b in buffers]
    offsets, end = [], _aligned(len(payload))
    for view in views:
        offsets.append((end, view.nbytes))
        end = _aligned(end + view.nbytes)
    head = pickle.dumps(data.fingerprint) + pickle.dumps({"payload": len(payload), "buffers": offsets})
    start = _aligned(len(head))
    make_folders(path.parent)
    tmp = temporary_name(path)
    try:
        with create_file(tmp) as fh:
            fh.write(head)
            _write_at(fh, start, payload)
            for (offset, _), view in zip(offsets, views):
                _write_at(fh, start + offset, view)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_at(fh, offset: int, data) -> None:
    fh.write(b"\0" * (offset - fh.tell()))
    fh.write(data)


def read_data_fingerprint(path: Path) -> Optional[str]:
    """The fingerprint a data file was written for; None when there is no readable one; UntrustedFile
    when there is one that fails pipeline.trusted's checks."""
    try:
        with open_trusted(path) as fh:
            value = pickle.load(fh)
    except UnsafeFile:
        raise
    except (OSError, pickle.UnpicklingError, EOFError, ValueError):
        return None
    return value if isinstance(value, str) else None


def read_data_file(path: str, fingerprint: str):
    """The data of a data file, its arrays views of the file's pages; RuntimeError when the file was
    written for other data; UntrustedFile when it fails pipeline.trusted's checks."""
    with open_trusted(path) as fh:
        written_for = pickle.load(fh)
        if written_for != fingerprint:
            raise RuntimeError(f"{path} holds other data (fingerprint {written_for}, "
                               f"this run's is {fingerprint})")
        index = pickle.load(fh)
        start = _aligned(fh.tell())
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    whole = memoryview(mapped)
    buffers = [whole[start + offset:start + offset + size] for offset, size in index["buffers"]]
    return pickle.loads(whole[start:start + index["payload"]], buffers=buffers)


def resolve_data(ref):
    """The data a DataRef names: the object itself, or its data file, read once per worker."""
    if ref.obj is not None:
        return ref.obj
    key = (ref.path, ref.fingerprint)
    if key not in _DATA_CACHE:
        _DATA_CACHE.clear()  # one data set per worker at a time
        _DATA_CACHE[key] = read_data_file(ref.path, ref.fingerprint)
    return _DATA_CACHE[key]
