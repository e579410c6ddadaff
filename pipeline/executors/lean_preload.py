"""Imported first by the processes a lean run starts (a forkserver preloads it before the model libraries,
a worker or a Ray task before its first fit): importing it installs `pipeline.lean_imports`, so the
libraries imported after it, in it and in every process forked from it, come without scikit-learn."""

# the engine's default model kinds: their profiles name what is imported lean
import pipeline.models.lightgbm  # noqa: F401
import pipeline.models.nn  # noqa: F401
import pipeline.models.xgboost  # noqa: F401
from pipeline.lean_imports import install

install()
