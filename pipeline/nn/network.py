"""The tabular MLP: an embedding per categorical column, concatenated with the numeric inputs (as they
are, or each through a periodic embedding)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from pipeline.nn.options import embedding_dim


class Dropout(nn.Module):
    """Dropout whose CPU mask costs a quarter of the random draws: each 64-bit draw of torch's generator
    gives four 16-bit lanes, and a lane below round(p * 65536) drops its unit. The CPU's own dropout
    draws a Mersenne Twister number per unit, a fifth of a training step of this network. So p is
    kept to 1/65536 and the kept units are scaled by 1 / (1 - that p). Other devices (CUDA's Philox
    generator is fast) and p of 0 or 1 use torch's dropout. No parameters: state dicts are unchanged."""

    LANES = 65536

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.dropped = round(p * self.LANES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or x.device.type != "cpu" or not 0 < self.dropped < self.LANES:
            return F.dropout(x, self.p, self.training)
        n = x.numel()
        draws = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64)
        lanes = draws.view(torch.int16)[:n].view(x.shape)  # uniform over -32768 .. 32767
        keep = lanes >= self.dropped - self.LANES // 2
        return x * keep.to(x.dtype).mul_(self.LANES / (self.LANES - self.dropped))

    def extra_repr(self) -> str:
        return f"p={self.p}"


class PeriodicEmbedding(nn.Module):
    """Each number x of column j as relu(W [cos(2 pi c_j x), sin(2 pi c_j x)] + b): `frequencies` trained
    frequencies c_j per column, drawn from N(0, scale^2) at the start, and one linear map shared by the
    columns (Gorishniy et al., 2022, "On Embeddings for Numerical Features in Tabular Deep Learning",
    PLR lite). A plain MLP draws smooth functions of its inputs; these let it draw the step-like ones
    that trees find in a column."""

    def __init__(self, columns: int, frequencies: int, scale: float, dim: int):
        super().__init__()
        self.frequencies = nn.Parameter(torch.randn(columns, frequencies) * scale)
        self.linear = nn.Linear(2 * frequencies, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        angles = (2 * math.pi) * self.frequencies * x.unsqueeze(-1)  # (rows, columns, frequencies)
        return F.relu(self.linear(torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1))).flatten(1)


class TabularMLP(nn.Module):
    def __init__(
        self,
        num_numeric: int,
        cardinalities: list[int],
        out_dim: int,
        hidden_sizes: tuple[int, ...] = (256, 128),
        dropout: float = 0.1,
        max_embedding_dim: int = 16,
        numeric_embedding: str = "none",
        embedding_frequencies: int = 16,
        frequency_scale: float = 1.0,
        numeric_embedding_dim: int = 16,
    ):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(c, embedding_dim(c, max_embedding_dim)) for c in cardinalities)
        self.numeric_embedding = (
            PeriodicEmbedding(num_numeric, embedding_frequencies, frequency_scale, numeric_embedding_dim)
            if numeric_embedding == "periodic" and num_numeric else None
        )
        numeric_width = num_numeric * numeric_embedding_dim if self.numeric_embedding is not None else num_numeric
        width = numeric_width + sum(e.embedding_dim for e in self.embeddings)
        self.input_width = width
        layers: list[nn.Module] = []
        for size in hidden_sizes:
            layers += [nn.Linear(width, size), nn.LayerNorm(size), nn.ReLU(), Dropout(dropout)]
            width = size
        layers.append(nn.Linear(width, out_dim))
        self.mlp = nn.Sequential(*layers)

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> torch.Tensor:
        numbers = x_num if self.numeric_embedding is None else self.numeric_embedding(x_num)
        parts = [numbers] + [emb(x_cat[:, j]) for j, emb in enumerate(self.embeddings)]
        return self.mlp(torch.cat(parts, dim=1) if len(parts) > 1 else numbers)


@dataclass(frozen=True)
class NetSpec:
    """The network's shape: what the data gives (inputs, outputs) and the architecture parameters."""

    num_numeric: int
    cardinalities: tuple[int, ...]
    out_dim: int
    hidden_sizes: tuple[int, ...] = (256, 128)
    dropout: float = 0.1
    max_embedding_dim: int = 16
    numeric_embedding: str = "none"  # none | periodic
    embedding_frequencies: int = 16
    frequency_scale: float = 1.0
    numeric_embedding_dim: int = 16

    def build(self) -> TabularMLP:
        return TabularMLP(
            self.num_numeric, list(self.cardinalities), self.out_dim, self.hidden_sizes, self.dropout,
            self.max_embedding_dim, self.numeric_embedding, self.embedding_frequencies, self.frequency_scale,
            self.numeric_embedding_dim,
        )


def to_prediction(out: torch.Tensor, problem_type: str, y_scale=(0.0, 1.0)) -> np.ndarray:
    """Network outputs to what models return: class probabilities, or values on the label's scale."""
    if problem_type == "regression":
        return out.squeeze(1).double().cpu().numpy() * y_scale[1] + y_scale[0]
    return torch.softmax(out.float(), dim=1).double().cpu().numpy()
