"""The network's numeric inputs: quantile scaling in the encoder and periodic embeddings in the network."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
import torch

from pipeline.errors import ConfigError
from pipeline.memory.shape import DataShape
from pipeline.metrics import METRICS
from pipeline.models.memory import activation_bytes_per_row, network_size
from pipeline.nn.encoding import TabularEncoder
from pipeline.nn.loop import Arrays, Loop, LoopConfig, NetSpec
from pipeline.nn.network import TabularMLP
from pipeline.nn.options import check

PERIODIC = {"numeric_embedding": "periodic", "embedding_frequencies": 8, "numeric_embedding_dim": 12}


def frame(n=4000, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    skewed = rng.lognormal(sigma=1.5, size=n)
    skewed[:40] = np.nan
    return pd.DataFrame({
        "skewed": skewed.astype(np.float32),
        "discrete": rng.integers(0, 3, n).astype(np.float32),
        "colour": pd.Categorical(rng.choice(["red", "green"], n)),
    })


# --------------------------------------------------------------------------- the encoder


def test_quantile_scaling_spreads_a_skewed_column_as_a_normal_one():
    X = frame()
    standard, _ = TabularEncoder().fit_transform(X)
    quantile, codes = TabularEncoder(scaling="quantile").fit_transform(X)
    skew = lambda v: float(np.mean(v ** 3))  # noqa: E731  (the columns have mean 0 and std 1)
    assert skew(standard[:, 0]) > 3  # a lognormal column, standardized, stays skewed
    assert abs(skew(quantile[:, 0])) < 0.2
    present = ~np.isnan(X["skewed"].to_numpy())
    order = np.argsort(X["skewed"].to_numpy()[present])
    assert np.all(np.diff(quantile[present, 0][order]) >= 0)  # ranks kept
    assert codes.shape == (len(X), 1)


def test_quantile_scaling_matches_scikit_learns_inside_the_range():
    from sklearn.preprocessing import QuantileTransformer

    values = np.random.default_rng(1).gamma(2.0, size=(3000, 1)).astype(np.float32)
    X = pd.DataFrame({"x": values[:, 0]})
    encoder = TabularEncoder(scaling="quantile").fit(X)
    ours, _ = encoder.transform(X)
    theirs = QuantileTransformer(output_distribution="normal", n_quantiles=1000).fit_transform(values)[:, 0]
    theirs = (theirs - theirs.mean()) / theirs.std()
    inside = (values[:, 0] > np.quantile(values, 0.01)) & (values[:, 0] < np.quantile(values, 0.99))
    assert np.abs(ours[inside, 0] - theirs[inside]).max() < 0.02


def test_quantile_scaling_of_repeated_values_and_values_beyond_the_training_range():
    X = frame()
    encoder = TabularEncoder(scaling="quantile").fit(X)
    num, _ = encoder.transform(X)
    levels = np.unique(num[:, 1])
    assert len(levels) == 3  # one value each, the middle of its ranks' range: symmetric about the middle
    assert levels[0] == pytest.approx(-levels[2], abs=0.1)
    far = pd.DataFrame({"skewed": np.float32([-1e9, 1e9, np.nan]), "discrete": np.float32([0, 2, 1]),
                        "colour": pd.Categorical(["red", "blue", None])})
    out, codes = encoder.transform(far)
    assert np.isfinite(out).all()
    assert out[0, 0] == pytest.approx(num[:, 0].min(), abs=1e-3)  # the end levels, not beyond
    assert out[1, 0] == pytest.approx(num[:, 0].max(), abs=1e-3)
    assert codes[1, 0] == 0 and codes[2, 0] == 0  # unseen and missing categories


def test_an_encoder_pickled_before_the_scaling_option_still_transforms():
    X = frame(500)
    encoder = TabularEncoder().fit(X)
    expected, _ = encoder.transform(X)
    state = dict(vars(encoder))
    del state["scaling"]  # what an earlier version's pickle holds
    old = TabularEncoder.__new__(TabularEncoder)
    old.__dict__.update(state)
    again, _ = pickle.loads(pickle.dumps(old)).transform(X)
    np.testing.assert_array_equal(again, expected)


# --------------------------------------------------------------------------- the network


def test_periodic_embedding_sizes_match_the_memory_estimate():
    data = DataShape(rows=100, numeric=5, categorical=3, classes=4, cardinality=20)
    params = {"hidden_sizes": [64, 32], "max_embedding_dim": 16, **PERIODIC}
    count, width = network_size(params, data)
    net = TabularMLP(5, [21, 21, 21], 4, (64, 32), 0.1, 16, "periodic", 8, 1.0, 12)
    assert count == sum(p.numel() for p in net.parameters())
    assert width == net.mlp[0].in_features == net.input_width == 5 * 12 + 3 * 9
    assert activation_bytes_per_row(params, data) > activation_bytes_per_row({"hidden_sizes": [64, 32]}, data)
    out = net(torch.randn(7, 5), torch.randint(0, 21, (7, 3)))
    assert out.shape == (7, 4)


def test_periodic_embeddings_learn_a_column_the_plain_network_cannot():
    """A label that flips many times along one number: a small MLP on the number itself draws a
    smooth function, the periodic embedding's frequencies draw the steps."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(3000, 1, generator=g) * 2 - 1
    y = (torch.sin(12 * x[:, 0]) > 0).long()
    cats = torch.zeros(3000, 0, dtype=torch.long)
    data = Arrays(x[:2000], cats[:2000], y[:2000], x[2000:], cats[2000:], y[2000:])
    config = LoopConfig(batch_size=128, max_epochs=25, patience=0, learning_rate=3e-3)
    scores = {}
    for embedding in ("none", "periodic"):
        spec = NetSpec(num_numeric=1, cardinalities=(), out_dim=2, hidden_sizes=(16,), dropout=0.0,
                       numeric_embedding=embedding, embedding_frequencies=8, numeric_embedding_dim=8)
        result = Loop(spec, config, "binary", METRICS["accuracy"], torch.device("cpu"), seed=1).run(data)
        scores[embedding] = result.best_score
    assert scores["periodic"] > 0.95
    assert scores["none"] < scores["periodic"] - 0.1


@pytest.mark.parametrize("params, key", [
    ({"numeric_embedding": "fourier"}, "numeric_embedding"),
    ({"numeric_scaling": "robust"}, "numeric_scaling"),
    ({"embedding_frequencies": 0}, "embedding_frequencies"),
    ({"numeric_embedding_dim": 2.5}, "numeric_embedding_dim"),
    ({"frequency_scale": 0}, "frequency_scale"),
])
def test_bad_numeric_options_name_the_key_and_what_is_valid(params, key):
    with pytest.raises(ConfigError, match=f"model.nn.params.{key}="):
        check(params, "model.nn.params")
