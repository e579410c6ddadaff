"""The cost of inferring column roles at 100k, 1M and 10M rows: from a Parquet file's first rows before
planning (`pipeline.data.roles_before_reading`), and from a loaded table's sample (`pipeline.data.infer_roles`).
Neither reads or scans more than roles.SAMPLE_ROWS rows, so both should stay flat as the table grows."""

from __future__ import annotations

from bench.common import Options, figure, log, timed

SIZES = {"100k": 100_000, "1M": 1_000_000, "10M": 10_000_000}


def table(rows: int):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    days = pd.Timestamp("2000-01-01") + pd.to_timedelta(rng.integers(0, 7000, rows), unit="D")
    frame = pd.DataFrame({f"x{i}": rng.normal(size=rows).astype(np.float32) for i in range(8)})
    frame["customer_id"] = np.arange(rows)
    frame["day"] = days.strftime("%Y-%m-%d")
    frame["city"] = pd.Categorical.from_codes(rng.integers(0, 30, rows), [f"c{i}" for i in range(30)])
    frame["y"] = frame["x0"] * 2 + rng.normal(size=rows)
    return frame


def run(opts: Options) -> dict:
    from pathlib import Path

    from pipeline.components import DataConf
    from pipeline.data import infer_roles, roles_before_reading

    n = opts.n(3, 1)
    sizes = {"100k": 100_000} if opts.quick else SIZES
    figures = []
    for name, rows in sizes.items():
        log(f"role_inference: {name} rows")
        frame = table(rows)
        path = Path(opts.scratch) / f"roles-{name}.parquet"
        frame.to_parquet(path, row_group_size=1_000_000)
        spec = DataConf(name="parquet", path=str(path), label="y", _target_="pipeline.data_sources.ParquetSource")
        infer_roles(frame, spec, "y", "regression")  # imports and skrub's first use, untimed
        before, loaded = [], []
        for _ in range(n):
            before.append(timed(lambda: roles_before_reading(spec, path.parent, "regression"))[0])
            loaded.append(timed(lambda f=frame: infer_roles(f, spec, "y", "regression"))[0])
        roles = roles_before_reading(spec, path.parent, "regression")
        figures.append(figure(f"roles before planning (file's first rows) · {name} rows", before, "s",
                              group="role_inference", target=("<=", 1.0), roles=roles.summary()))
        figures.append(figure(f"roles from the loaded table's sample · {name} rows", loaded, "s",
                              group="role_inference", target=("<=", 1.0)))
        del frame
    return {
        "settings": {"repeats": n, "columns": "8 float32, an id, dates as text, a 30-level category, the label",
                     "sample_rows": 10_000, "timer": "perf_counter around each call; one untimed call first"},
        "figures": figures,
        "notes": [],
    }
