"""A fitted object saved compressed: what a model kind whose fitted object is large and regular
(`ModelProfile.packed`: a forest's trees grown whole, tens of MB a fold, mostly small integers) pickles
in its place.

A fold model is pickled several times in a run (its result in `tasks/`, the tail's measure of its size,
each predictor holding it, the payload logged to MLflow): the compressed bytes are made once and kept
beside the object they stand for, so every later pickle copies them. zlib at level 1 (the standard
library's: no codec to install): a forest's 129 MB of predictor became 30 MB, compressed in 0.84 s and
read back in 0.34 s on the 2-core box."""

from __future__ import annotations

import pickle
import zlib

# the fastest: levels 3 and 6 made the forest above 6% and 10% smaller, at 1.3 and 3.2 times the time
LEVEL = 1


class Packed:
    """An object's pickle, zlib-compressed."""

    __slots__ = ("blob",)

    def __init__(self, blob: bytes):
        self.blob = blob

    @classmethod
    def of(cls, obj) -> "Packed":
        return cls(zlib.compress(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), LEVEL))

    def unpack(self):
        # the outer pickle holding these bytes was read only after the run's checks of who wrote it
        return pickle.loads(zlib.decompress(self.blob))

    def __reduce__(self):
        return Packed, (self.blob,)


def packed_state(holder, state: dict, key: str) -> dict:
    """`state` (holder's own, to be pickled) with `state[key]` packed, the packing made once per object
    and kept on `holder` under `_packed_`, which is itself never pickled."""
    state = dict(state)
    kept = state.pop("_packed_", None)
    obj = state.get(key)
    if obj is None:
        return state
    if kept is None or kept[0] is not obj:
        kept = (obj, Packed.of(obj))
        holder.__dict__["_packed_"] = kept
    state[key] = kept[1]
    return state


def unpacked_state(state: dict, key: str) -> dict:
    """`state` read back: `state[key]` unpacked, its packing kept for the next pickle."""
    packed = state.get(key)
    if not isinstance(packed, Packed):
        return state
    obj = packed.unpack()
    return {**state, key: obj, "_packed_": (obj, packed)}
