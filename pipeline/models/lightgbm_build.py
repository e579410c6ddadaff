"""Which LightGBM build is installed: whether its CUDA learner (device_type=cuda) can train here."""

from __future__ import annotations


def lightgbm_cuda_available() -> bool:
    """Whether the installed LightGBM was built with its CUDA learner and a CUDA device can run it.

    False until a probe says otherwise: the PyPI wheel carries only the CPU and OpenCL learners."""
    return False
