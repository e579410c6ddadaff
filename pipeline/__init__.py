"""A declarative Hydra pipeline engine for tabular model training on CPUs and GPUs."""

__version__ = "0.1.0"
