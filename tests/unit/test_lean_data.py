"""No extra copies from the file to the library: a Parquet file read a column at a time into one block
per dtype, float32 numbers kept where they were read, a fold's rows copied only where the library reads
them and dropped once it has binned them, and workers mapping one data file."""

import gc
import mmap
import weakref
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.config import DataConf
from pipeline.models.base import FitContext, Placement


@pytest.fixture
def mixed(tmp_path):
    """Every kind of column a user's file holds, in several row groups."""
    n, rng = 900, np.random.default_rng(0)
    frame = pd.DataFrame({
        "a": rng.normal(size=n).astype("float32"), "s": rng.choice(["x", "y", None], n), "b": rng.normal(size=n),
        "i": rng.integers(0, 5, n), "c": pd.Categorical(rng.choice(["p", "q"], n)),
        "f": np.where(rng.random(n) < 0.1, np.nan, rng.random(n)), "t": rng.random(n) < 0.5,
        "d": pd.date_range("2020-01-01", periods=n, freq="h"), "i8": rng.integers(0, 5, n).astype("int8"),
        "h": rng.random(n).astype("float32"), "label": rng.integers(0, 2, n),
    })
    path = tmp_path / "mixed.parquet"
    frame.to_parquet(path, row_group_size=250)
    return path, frame


def test_the_column_reader_gives_what_pandas_gives(mixed, tmp_path):
    from pipeline.parquet import read_parquet

    path, frame = mixed
    pd.testing.assert_frame_equal(read_parquet(path), pd.read_parquet(path))
    indexed = tmp_path / "indexed.parquet"
    frame.set_index("i").to_parquet(indexed)  # a stored index: pandas reads it
    pd.testing.assert_frame_equal(read_parquet(indexed), pd.read_parquet(indexed))


@pytest.mark.parametrize("cores", [1, 3])
def test_columns_are_decoded_on_a_thread_per_usable_core(mixed, monkeypatch, cores):
    import threading

    import pipeline.parquet

    path, _ = mixed
    readers = []
    original = pipeline.parquet._read_into
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(pipeline.parquet, "_read_into",
                        lambda *a: readers.append(threading.current_thread().name) or original(*a))
    pd.testing.assert_frame_equal(pipeline.parquet.read_parquet(path), pd.read_parquet(path))
    assert len(readers) == 5  # a, b, i, h, label: the complete numbers of 4 or 8 bytes
    if cores == 1:
        assert set(readers) == {threading.main_thread().name}
    else:
        assert all(name.startswith("parquet") for name in readers)


def test_float32_numbers_reach_the_table_where_they_were_read(mixed, monkeypatch):
    import pipeline.parquet
    from pipeline.data import load

    read = []
    original = pipeline.parquet.read_parquet
    monkeypatch.setattr(pipeline.parquet, "read_parquet",
                        lambda path, *a: read.append(original(path, *a)) or read[-1])
    path, _ = mixed
    frame = pd.DataFrame({f"x{i}": np.arange(400, dtype=np.float32) * i for i in range(5)})
    frame["label"] = np.arange(400) % 2
    frame.to_parquet(path, row_group_size=100)
    data = load(DataConf(name="p", _target_="pipeline.data_sources.ParquetSource", path=str(path), label="label"), Path("."))
    values = data.X.to_numpy()
    assert values.dtype == np.float32
    assert np.shares_memory(values, read[0][list(data.X.columns)].to_numpy())  # typed without a copy


def _frames_given_to(monkeypatch, module, name: str) -> list:
    """Weak references to the frames `module.name(...)` is given as its first argument."""
    given = []
    original = getattr(module, name)

    def recording(self, data, *args, **kwargs):
        if isinstance(data, pd.DataFrame):
            given.append(weakref.ref(data))
        return original(self, data, *args, **kwargs)

    monkeypatch.setattr(module, name, recording)
    return given


def test_lightgbm_drops_a_folds_frames_once_it_has_binned_them(adult, monkeypatch):
    import lightgbm as lgb

    from pipeline.models import LightGBMModel

    given = _frames_given_to(monkeypatch, lgb.Dataset, "__init__")
    alive_while_training = []
    update = lgb.Booster.update

    def first_round(self, *args, **kwargs):
        gc.collect()
        alive_while_training.append(sum(ref() is not None for ref in given))
        return update(self, *args, **kwargs)

    monkeypatch.setattr(lgb.Booster, "update", first_round)
    model = LightGBMModel({"num_iterations": 3})
    model.fit_rows(adult.X, adult.y, adult.train_idx, adult.val_idx, FitContext("binary", 2, Placement(1)))
    assert len(given) == 2 and alive_while_training[0] == 0


def test_xgboost_bins_its_training_rows_without_a_float_copy_and_drops_their_frames(adult, monkeypatch):
    import xgboost as xgb

    from pipeline.models import XGBoostModel

    given = _frames_given_to(monkeypatch, xgb.QuantileDMatrix, "__init__")
    given += _frames_given_to(monkeypatch, xgb.DMatrix, "__init__")
    alive, matrices = [], []
    train = xgb.train

    def training(params, dtrain, *args, **kwargs):
        gc.collect()
        alive.append(sum(ref() is not None for ref in given))
        matrices.append(type(dtrain))
        return train(params, dtrain, *args, **kwargs)

    monkeypatch.setattr(xgb, "train", training)
    model = XGBoostModel({"num_boost_round": 3})
    model.fit_rows(adult.X, adult.y, adult.train_idx, adult.val_idx, FitContext("binary", 2, Placement(1)))
    assert matrices == [xgb.QuantileDMatrix] and alive == [0]


def test_the_network_trains_from_the_one_float32_matrix_its_encoder_fills(adult, monkeypatch):
    from pipeline.models import TorchMLPModel
    from pipeline.nn import loop

    seen = []
    run = loop.Loop.run
    monkeypatch.setattr(loop.Loop, "run", lambda self, arrays: seen.append(arrays) or run(self, arrays))
    model = TorchMLPModel({"max_epochs": 1})
    model.fit_rows(adult.X, adult.y, adult.train_idx, adult.val_idx, FitContext("binary", 2, Placement(1)))
    x = seen[0].x_num.numpy()
    assert x.dtype == np.float32 and x.flags["C_CONTIGUOUS"] and x.base is not None  # torch.from_numpy: no copy
    expected, _ = model.encoder_.transform(adult.X.iloc[adult.train_idx])
    np.testing.assert_array_equal(x, expected)


def test_workers_map_the_data_file_instead_of_copying_it(adult, tmp_path):
    from pipeline.graph.datafile import read_data_file, write_data_file

    path = tmp_path / "data.pkl"
    write_data_file(path, adult)
    data = read_data_file(str(path), adult.fingerprint)
    values = data.X[adult.numeric].to_numpy()
    owner = values
    while not isinstance(owner, (mmap.mmap, memoryview)) and getattr(owner, "base", None) is not None:
        owner = owner.base
    assert isinstance(owner, memoryview) and isinstance(owner.obj, mmap.mmap)  # a view of the mapped file
    assert not values.flags["WRITEABLE"]
    pd.testing.assert_frame_equal(data.X, adult.X)
    np.testing.assert_array_equal(data.y, adult.y)
    with pytest.raises(RuntimeError, match="holds other data"):
        read_data_file(str(path), "another")
