"""A Hydra launcher that runs a sweep's jobs in parallel processes, each pinned to a GPU/CPU slot.

Select it with `hydra/launcher=gpu`; see docs/sweeps.md.
"""
