"""Imported first by the processes a lean run starts (a forkserver preloads it before the model libraries,
a worker or a Ray task before its first fit): importing it installs `pipeline.lean_imports`, so the
libraries imported after it, in it and in every process forked from it, come without scikit-learn."""

import pipeline.models  # noqa: F401 - the engine's model kinds: their profiles name what is imported lean
from pipeline.lean_imports import install

install()
