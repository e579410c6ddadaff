"""The run's data as MLflow dataset inputs: training, validation and test, each with its name,
digest, schema and source, so the runs view lists them and runs on the same data compare.

Nothing is re-read or re-hashed: the digest comes from the fingerprint the run already computed
(content and split), the schema from the column types.
"""

from __future__ import annotations

import hashlib
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

CONTEXTS = ("training", "validation", "test")


@dataclass(frozen=True)
class DataSummary:
    """What the dataset inputs need of the run's data, and nothing of its rows: it travels to the
    tracker's process instead of the tables."""

    name: str
    fingerprint: str
    label: str
    label_kind: str  # MLflow's column type of the label
    columns: tuple[tuple[str, str], ...]  # (feature, MLflow column type)
    rows: tuple[tuple[str, int], ...]  # (context, row count)


def summarize(data) -> DataSummary:
    """The summary of a loaded data set: features as read (numbers) or typed (categories), split sizes."""
    columns = []
    for column in data.X.columns:
        if isinstance(data.X[column].dtype, pd.CategoricalDtype):
            kind = "string"
        else:
            # pandas' own names too: a Parquet file's nullable 'Int64' or 'boolean' column
            raw = pd.api.types.pandas_dtype(data.raw_dtypes.get(column, "float64"))
            kind = "long" if raw.kind in "iu" else "boolean" if raw.kind == "b" else "double"
        columns.append((column, kind))
    rows = {"training": data.train_idx, "validation": data.val_idx, "test": data.test_idx}
    return DataSummary(
        data.name, data.fingerprint, data.label, "double" if data.problem_type == "regression" else "string",
        tuple(columns), tuple((context, len(rows[context])) for context in CONTEXTS),
    )


def schema_of(summary: DataSummary):
    """MLflow's column schema of the features and the label."""
    from mlflow.types import ColSpec, Schema

    return Schema([ColSpec(kind, column) for column, kind in summary.columns]
                  + [ColSpec(summary.label_kind, summary.label)])


def digest(fingerprint: str, context: str) -> str:
    return hashlib.sha256(f"{fingerprint}/{context}".encode()).hexdigest()[:16]


def source_of(location: str):
    from mlflow.data.code_dataset_source import CodeDatasetSource
    from mlflow.data.dataset_source_registry import resolve_dataset_source

    if location.startswith("generator:"):
        return CodeDatasetSource(tags={"generator": location.removeprefix("generator:")})
    with warnings.catch_warnings():  # MLflow registers the local artifact source twice and says so
        warnings.filterwarnings("ignore", message=".*can be interpreted in multiple ways.*")
        return resolve_dataset_source(location)


def locations(source, base_dir: Path) -> dict[str, str]:
    """Where each split's rows come from (`source`: a pipeline.data_sources.DataSource): a path, a URL
    (credentials masked) or 'generator:…'."""
    from pipeline.data_sources import where

    spec = source.spec
    main = source.location(base_dir)
    test = where(spec.test_path, base_dir) if spec.test_path else main
    return {"training": main, "validation": main, "test": test}


def log_datasets(summary: DataSummary, locations: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Log the three splits of the run's data to the active run; `locations` maps each context to
    where its rows came from (a path, a URL, or 'generator:…'). Returns each context's (name, digest),
    by which a model's scores name the split they were measured on."""
    import mlflow
    from mlflow.data.meta_dataset import MetaDataset

    schema = schema_of(summary)
    datasets, contexts, tags = [], [], []
    for context, count in summary.rows:
        datasets.append(MetaDataset(source_of(locations[context]), name=summary.name,
                                    digest=digest(summary.fingerprint, context), schema=schema))
        contexts.append(context)
        tags.append({"pipeline.rows": str(count)})
    for attempt in range(LOG_ATTEMPTS):
        try:
            mlflow.log_inputs(datasets=datasets, contexts=contexts, tags_list=tags)
            return {c: (d.name, d.digest) for c, d in zip(contexts, datasets)}
        except Exception as exc:
            # Runs logging the same data at once (a sweep's jobs) each insert the dataset when the store
            # lacks it; the loser of that race gets the store's unique-constraint error and its whole
            # transaction is rolled back. Again, it finds the dataset and only links it to its run.
            if attempt == LOG_ATTEMPTS - 1 or not _lost_insert_race(exc):
                raise
            time.sleep(0.05 * (attempt + 1))


LOG_ATTEMPTS = 3


def _lost_insert_race(exc: Exception) -> bool:
    """The store refused a row another process inserted first (SQLite, PostgreSQL, MySQL wordings)."""
    text = str(exc).lower()
    return "integrityerror" in text or "unique constraint" in text or "duplicate" in text
