"""A user's own data source and searcher, named by `_target_` from the command line."""

from __future__ import annotations

from pathlib import Path

from pipeline.data_sources import DataSource
from pipeline.searchers import Searcher


class Halves(DataSource):
    """A seeded table whose label is the sign of x0 (any model separates it); records each read."""

    def __init__(self, spec, rows: int = 400, record: str = ""):
        super().__init__(spec)
        self.rows, self.record = rows, record

    @property
    def label(self) -> str:
        return "positive"

    def read(self, base_dir: Path):
        import numpy as np
        import pandas as pd

        rng = np.random.default_rng(self.spec.seed)
        x = rng.normal(size=(self.rows, 3))
        if self.record:
            Path(self.record).write_text(f"{self.rows} rows, seed {self.spec.seed}")
        return pd.DataFrame({"x0": x[:, 0], "x1": x[:, 1], "x2": x[:, 2], "positive": x[:, 0] > 0})


class Listed(Searcher):
    """Tries the listed values of each dimension (a grid over them); other dimensions keep their low end."""

    def __init__(self, values: dict):
        self.values = values

    def sampler(self, hpo, model, space):
        import optuna

        grid = {k: list(self.values.get(k, d.grid(2)[:1])) for k, d in space.items()}
        return optuna.samplers.GridSampler(grid, seed=hpo.seed)
