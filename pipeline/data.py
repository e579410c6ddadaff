"""Load a table (bundled, CSV, Parquet or synthetic), check it, type it and split it.

Categorical columns stay categorical (pandas categories fixed from the training rows), so
LightGBM and XGBoost use native categories and the network learns embeddings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from pipeline import csv_dialect, number_text, split as split_module
from pipeline.config import DataConf
from pipeline.data_sources import DataSource, resolve, source_for
from pipeline.table_files import read_file
from pipeline.errors import DataError
from pipeline.features import FeatureMaker
from pipeline.fingerprint import fingerprint
from pipeline.problem import inferred_line, problem_type_of, small_whole_values
from pipeline.roles import OVERRIDDEN, Roles
from pipeline.schema import category_text, encode, finite

log = logging.getLogger(__name__)


@dataclass
class TabularData:
    """Typed features and encoded labels with a fixed train/validation/test split."""

    X: pd.DataFrame
    y: np.ndarray
    problem_type: str
    label: str
    classes: Optional[list] = None
    categorical: list[str] = field(default_factory=list)
    numeric: list[str] = field(default_factory=list)
    train_idx: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    val_idx: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    test_idx: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    name: str = ""
    fingerprint: str = ""
    raw_dtypes: dict[str, str] = field(default_factory=dict)  # numeric columns as read, for model signatures
    roles: Optional[Roles] = None  # each column's role (None: data.infer_roles=false)
    features: Optional[FeatureMaker] = None  # the raw columns into X's (None: X holds them as read)
    raw_example: Optional[pd.DataFrame] = None  # a few raw test rows, where X's columns are not the input's

    @property
    def num_classes(self) -> int:
        return len(self.classes) if self.classes is not None else 0

    def fit_idx(self, bagging: bool) -> np.ndarray:
        """Rows models learn from: train (holdout), or train and validation together (k-fold bagging)."""
        return np.concatenate([self.train_idx, self.val_idx]) if bagging else self.train_idx

    def fold_ids(self, num_folds: int, seed: int) -> np.ndarray:
        """Fold of each row of fit_idx(bagging=True), seeded (`split.fold_ids`)."""
        from pipeline import split

        return split.fold_ids(self.y[self.fit_idx(True)], num_folds, seed, self.problem_type)


def load(spec: DataConf, base_dir: Path, roles: Optional[Roles] = None,
         source: Optional[DataSource] = None) -> TabularData:
    """Read, check, type and split the data the spec names; every failure is a DataError. `roles`: the
    columns' roles inferred before planning from a sample of the file (else inferred here, from a sample);
    `source`: the run's data source (made from the spec when not given)."""
    source = source_for(spec, source)
    source.check()
    frame = source.read(base_dir)
    test_frame = (
        read_file(resolve(spec.test_path, base_dir), "data.test_path", storage_options=spec.storage_options)
        if spec.test_path else None
    )
    label = source.label
    frame = _check_columns(frame, spec, label, "data.path")
    if test_frame is not None:
        test_frame = _check_columns(test_frame, spec, label, "data.test_path")
    if spec.max_rows is not None and len(frame) > spec.max_rows:
        frame = frame.sample(n=spec.max_rows, random_state=_seed(spec)).reset_index(drop=True)
    n_main = len(frame)
    if test_frame is not None:
        frame = pd.concat([frame, test_frame[frame.columns]], ignore_index=True)
    y_raw = frame[label]
    X = frame.drop(columns=[label])
    problem_type = problem_type_of(y_raw, spec.problem_type, label)
    y, classes = _encode_label(y_raw, problem_type, label)
    if spec.problem_type == "auto":
        log.info(inferred_line(y_raw, problem_type, label, len(classes or ())))
    if spec.infer_roles and roles is None:
        roles = infer_roles(frame, spec, label, problem_type)
    order = _time_order(X, spec) if spec.split == "time" else None
    train_idx, val_idx, test_idx = _split(y, problem_type, spec, n_main, len(frame), order)
    split_module.say_parts(frame, y, problem_type, (train_idx, val_idx, test_idx), spec, roles)
    fit_rows = np.concatenate([train_idx, val_idx])
    features = raw_example = None
    if roles is not None:
        roles = _constant_beyond_the_sample(roles, X)
        features = FeatureMaker.fit(X, roles, fit_rows)
        if features.changes:
            raw_example = X.iloc[test_idx[:5]][features.inputs].copy()  # the columns a model reads
            X = features.transform(X)
        else:
            features = None
    by_role = [c.column for c in (roles.columns if roles else ())  # an override to categorical
               if c.role == "categorical" and c.reason == OVERRIDDEN and c.column in X.columns]
    declared = [*spec.categorical_columns, *by_role]
    categorical, numeric = _column_types(X, tuple(declared))
    raw_dtypes = {c: str(X[c].dtype) for c in numeric}
    X = _type_columns(X, categorical, numeric, fit_rows, test_idx, spec)
    data = TabularData(
        X, y, problem_type, label, classes, categorical, numeric, train_idx, val_idx, test_idx, spec.name,
        raw_dtypes=raw_dtypes, roles=roles, features=features, raw_example=raw_example,
    )
    data.fingerprint = fingerprint(data)
    return data


def _seed(spec: DataConf) -> int:
    return spec.seed if spec.seed is not None else 0


def _check_columns(frame: pd.DataFrame, spec: DataConf, label: str, key: str) -> pd.DataFrame:
    from pipeline.data_sources import check_column_names

    columns = [str(c) for c in frame.columns]
    frame.columns = columns
    check_column_names(columns, spec, label, key)
    frame = frame.drop(columns=list(spec.drop_columns))
    if frame.shape[1] < 2:
        raise DataError(f"{key}: no feature column is left besides the label {label!r}")
    y = frame[label]
    if y.isna().all():
        raise DataError(f"data.label={label!r}: every value of the label column is missing (NaN)")
    infinite = y.isin([np.inf, -np.inf]) & pd.api.types.is_float_dtype(y)
    n_missing, n_infinite = int(y.isna().sum()), int(infinite.sum())
    if n_missing or n_infinite:
        what = f"missing or infinite ({n_infinite} infinite)" if n_infinite else "missing"
        log.warning("data.label=%r: dropping %d rows whose label is %s", label, n_missing + n_infinite, what)
        frame = frame[y.notna() & ~infinite].reset_index(drop=True)
    if frame[label].nunique() < 2:
        raise DataError(
            f"data.label={label!r} is constant (every row is {_plain(frame[label].iloc[0])!r}); there is nothing to learn"
        )
    return frame


def _plain(value):
    """A numpy scalar as the Python value it holds (numpy 2 shows np.int64(2) where a user wrote 2)."""
    return value.item() if isinstance(value, np.generic) else value


def _encode_label(y: pd.Series, problem_type: str, label: str) -> tuple[np.ndarray, Optional[list]]:
    if problem_type == "regression":
        return y.to_numpy(dtype=np.float64), None
    distinct = small_whole_values(y)
    if distinct is not None:  # 0..63: each value's code by a lookup, no hashing of millions of rows
        lookup = np.full(int(distinct[-1]) + 1, -1, dtype=np.int64)
        lookup[distinct] = np.arange(len(distinct))
        return lookup[y.to_numpy()], distinct.tolist()
    classes = sorted(y.unique().tolist(), key=lambda v: (str(type(v)), v))
    codes = pd.Categorical(y, categories=classes).codes.astype(np.int64)
    return codes, classes


# at most this many distinct numbers beside a few text values: a column of category codes, not dirty numbers
CODE_LEVELS = 20


def _column_types(X: pd.DataFrame, declared: tuple[str, ...]) -> tuple[list[str], list[str]]:
    categorical, numeric = [], []
    for column in X.columns:
        s = X[column]
        if column in declared or isinstance(s.dtype, pd.CategoricalDtype) or pd.api.types.is_bool_dtype(s):
            categorical.append(column)
        elif pd.api.types.is_numeric_dtype(s):
            numeric.append(column)
        else:
            _check_text_in_numbers(column, s)
            categorical.append(column)
    return categorical, numeric


def _check_text_in_numbers(column: str, s: pd.Series) -> None:
    """A text column whose values are nearly all numbers is a numeric column with dirt in it, unless its
    numbers are few distinct codes: then the text is one more level of a categorical column (a car's
    cylinders 3, 4, 5, 6, 8 and 'rotary'; school grades 1 to 12 and 'K'), or its text values are codes beside
    whole numbers (`number_text.are_codes`: stations 117, 1083 and 'c168'): read as categories and said."""
    counts = s.value_counts(dropna=True)  # parse each distinct value once
    if counts.empty:
        return
    parsed = pd.to_numeric(pd.Series(counts.index, dtype=object), errors="coerce").to_numpy()
    is_text = np.isnan(parsed.astype(float))
    marks = is_text.copy()
    marks[is_text] = [number_text.is_missing_mark(str(v)) for v in counts.index[is_text]]
    if (is_text & ~marks).any():  # words beside missing marks ('?'): the words are the dirt
        counts, parsed, is_text = counts[~marks], parsed[~marks], is_text[~marks]
    bad = counts[is_text]
    n_bad, n_all = int(bad.sum()), int(counts.sum())
    if n_bad and n_bad <= 0.05 * n_all and n_all - n_bad >= 10:
        examples = ", ".join(repr(v) for v in list(bad.index)[:3])
        numbers = len(np.unique(parsed[~is_text]))
        if numbers <= CODE_LEVELS:
            log.info("column %r: %d distinct numbers and %d row(s) of text (%s): read as categories, each "
                     "value a level; if the text is dirt in a numeric column, clean those values", column,
                     numbers, n_bad, examples)
            return
        if number_text.are_codes(bad.index, parsed[~is_text]):
            log.warning("column %r: %d distinct whole numbers and %d row(s) of codes mixing letters and "
                        "digits (%s): read as categories (each value a level), not as numbers; if the text is "
                        "dirt in a numeric column, clean those values", column, numbers, n_bad, examples)
            return
        raise DataError(
            f"column {column!r} is numeric but {n_bad} row(s) hold text ({examples}) among {numbers} "
            f"distinct numbers; clean those values, or list the column in data.categorical_columns to treat "
            f"it as categories"
        )


def infer_roles(frame: pd.DataFrame, spec: DataConf, label: str, problem_type: Optional[str]) -> Roles:
    """The columns' roles from a sample of the frame (at most roles.SAMPLE_ROWS rows), said in the log."""
    from pipeline import roles as roles_module

    sample = roles_module.sample_of(frame, seed=_seed(spec))
    roles = roles_module.infer(sample, label, problem_type, dict(spec.column_roles), tuple(spec.drop_columns),
                               tuple(spec.categorical_columns), spec.leak_check)
    roles_module.report(roles, spec.leak_check)
    dates = roles.of("datetime")
    if dates and spec.split == "random":
        log.info("column(s) %s hold dates and the split is random: if the rows are ordered in time, "
                 "data.split=time data.time_column=%s trains on the past and tests on the future",
                 ", ".join(map(repr, dates)), roles_module.quoted(dates[0]))
    return roles


def roles_before_reading(spec: DataConf, base_dir: Path, problem_type: Optional[str],
                         source: Optional[DataSource] = None) -> Optional[Roles]:
    """The roles from the first rows of a local CSV or Parquet file (never the whole table), before
    planning; None where the source has no such file (the roles are then inferred at loading)."""
    from pipeline import roles as roles_module

    if not spec.infer_roles or spec.test_path:
        return None
    source = source_for(spec, source)
    path = source.local_path(base_dir)
    if path is None or source.kind not in ("csv", "parquet"):
        return None
    sample = _head(path, source.kind, roles_module.SAMPLE_ROWS)
    sample.columns = [str(c) for c in sample.columns]
    label = source.label
    if label not in sample.columns:
        return None  # the column checks at loading name what is wrong
    sample = sample[sample[label].notna()].drop(columns=[c for c in spec.drop_columns if c in sample.columns])
    return infer_roles(sample, spec, label, problem_type)


def _head(path: Path, kind: str, rows: int) -> pd.DataFrame:
    if kind == "parquet":
        import pyarrow.parquet as pq

        batch = next(pq.ParquetFile(path).iter_batches(batch_size=rows), None)
        return batch.to_pandas() if batch is not None else pd.read_parquet(path)
    return pd.read_csv(path, nrows=rows, **csv_dialect.options(path))


def write_schema(path: Path, data_or_roles) -> None:
    """schema.json: every column's role and reason (and, once loaded, the features the models read)."""
    import json

    from pipeline.store import atomic_write_bytes

    roles = getattr(data_or_roles, "roles", data_or_roles)
    if roles is None:
        return
    doc = json.loads(roles.to_json())
    X = getattr(data_or_roles, "X", None)
    if X is not None:
        kind = {True: "categorical", False: "numeric"}
        doc["features"] = {str(c): kind[isinstance(X[c].dtype, pd.CategoricalDtype)] for c in X.columns}
    atomic_write_bytes(path, json.dumps(doc, indent=2).encode())


def _constant_beyond_the_sample(roles: Roles, X: pd.DataFrame) -> Roles:
    """A column constant in the sample (a file's first rows, say) but not in the table keeps its dtype's role:
    one pass over those columns alone, which a sorted file needs."""
    from dataclasses import replace

    from pipeline.roles import ColumnRole

    changed = {}
    for c in roles.columns:
        if c.role == "constant" and c.reason != OVERRIDDEN and c.column in X.columns:
            values = X[c.column]
            if values.nunique(dropna=False) > 1:
                role = "numeric" if pd.api.types.is_numeric_dtype(values) else "categorical"
                changed[c.column] = ColumnRole(c.column, role, f"{c.reason}, but not in the whole table", c.dtype)
    if not changed:
        return roles
    log.info("column(s) %s: constant only in the sampled rows, kept as features", ", ".join(map(repr, changed)))
    return replace(roles, columns=tuple(changed.get(c.column, c) for c in roles.columns))


def _time_order(X: pd.DataFrame, spec: DataConf) -> np.ndarray:
    """The rows' positions from the earliest to the latest value of data.time_column."""
    column = spec.time_column
    if column not in X.columns:
        raise DataError(f"data.time_column={column!r} is not a feature column; columns: "
                        f"{', '.join(map(str, X.columns[:20]))}")
    values = X[column]
    if not pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_datetime64_any_dtype(values):
        parsed = pd.to_datetime(values, errors="coerce", format="mixed")
        if parsed.notna().sum() < 0.9 * values.notna().sum():
            raise DataError(f"data.time_column={column!r} holds neither dates nor numbers "
                            f"(e.g. {values.dropna().astype(str).head(3).tolist()})")
        values = parsed
    return np.argsort(values.to_numpy(), kind="stable")


def _split(y: np.ndarray, problem_type: str, spec: DataConf, n_main: int, n_all: int,
           order: Optional[np.ndarray] = None):
    from pipeline import split

    main = np.arange(n_main)
    if order is not None:  # data.split=time: the past trains, the later rows validate, the latest test
        ordered = order[order < n_main]
        n_test = 0 if n_all > n_main else int(round(n_main * spec.test_size))
        rest = ordered[:n_main - n_test]
        test = ordered[n_main - n_test:] if n_test else np.arange(n_main, n_all)
        n_val = int(round(len(rest) * spec.val_size))
        return np.sort(rest[:len(rest) - n_val]), np.sort(rest[len(rest) - n_val:]), np.sort(test)

    def strat(idx):
        if problem_type == "regression":
            return None
        counts = np.bincount(y[idx])
        return y[idx] if counts[counts > 0].min() >= 2 else None

    if n_all > n_main:  # a separate test file
        rest, test = main, np.arange(n_main, n_all)
    else:
        rest, test = split.holdout(main, spec.test_size, _seed(spec), strat(main))
    train, val = split.holdout(rest, spec.val_size, (_seed(spec), 1), strat(rest))  # a stream of its own
    return train, val, test


def _type_columns(X, categorical, numeric, fit_rows, test_rows, spec: DataConf) -> pd.DataFrame:
    """The numeric columns as one float32 block (numbers the file gave as float32 stay where they were
    read: no copy), each categorical column typed from the training rows' categories, in X's order."""
    typed = {}
    for column in categorical:
        values = category_text(X[column])
        codes, uniques = pd.factorize(values)
        seen = np.unique(codes[fit_rows])
        categories = sorted(str(v) for v in uniques[seen[seen >= 0]])
        coded = encode(values, categories, (codes, uniques))
        unseen_mask = np.zeros(len(values), dtype=bool)
        unseen_mask[test_rows] = True
        unseen_mask &= np.asarray(values.notna()) & (coded.codes == -1)
        if unseen_mask.any():
            examples = sorted(set(values[unseen_mask].astype(str)))[:5]
            message = (
                f"column {column!r}: {int(unseen_mask.sum())} test row(s) hold categories never seen in training "
                f"({', '.join(map(repr, examples))})"
            )
            if spec.unseen_categories == "error":
                raise DataError(message + "; set data.unseen_categories=missing to treat them as missing values")
            log.warning("%s; treated as missing values", message)
        typed[column] = coded
    return _assemble(X, numeric, typed)


def _assemble(X: pd.DataFrame, numeric: list[str], categorical: dict) -> pd.DataFrame:
    """A frame of X's columns in X's order: the numeric ones as one float32 block, a view of X's own
    when they are one float32 block already (else converted into one, block by block), and the
    typed categorical columns inserted beside it. Libraries then take rows from one block."""
    with np.errstate(over="ignore"):  # a number past float32's range: infinite, then missing, said
        values = (finite(X[numeric].to_numpy(dtype=np.float32, na_value=np.nan), numeric, "the table")
                  if numeric else np.empty((len(X), 0), dtype=np.float32))
    out = pd.DataFrame(values, columns=numeric, index=X.index, copy=False)
    for position, column in enumerate(X.columns):
        if column in categorical:
            out.insert(position, column, categorical[column])
    return out


def read_table(spec: DataConf, base_dir: Path, source: Optional[DataSource] = None) -> pd.DataFrame:
    """The table a spec names, as read: no label, typing or split (new rows to score)."""
    return source_for(spec, source).read(base_dir)


def local_path(spec: DataConf, base_dir: Path, source: Optional[DataSource] = None) -> Optional[Path]:
    """The local file a spec's source reads; None for bundled, synthetic and remote sources."""
    return source_for(spec, source).local_path(base_dir)
