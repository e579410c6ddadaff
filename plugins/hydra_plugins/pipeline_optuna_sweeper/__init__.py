"""A Hydra sweeper that searches overrides with Optuna, batch by batch through the launcher.

Select it with `hydra/sweeper=optuna`; see docs/sweeps.md.
"""
