"""The tabular MLP: an embedding per categorical column, concatenated with the numeric inputs."""

from __future__ import annotations

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


class TabularMLP(nn.Module):
    def __init__(
        self,
        num_numeric: int,
        cardinalities: list[int],
        out_dim: int,
        hidden_sizes: tuple[int, ...] = (256, 128),
        dropout: float = 0.1,
        max_embedding_dim: int = 16,
    ):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(c, embedding_dim(c, max_embedding_dim)) for c in cardinalities)
        width = num_numeric + sum(e.embedding_dim for e in self.embeddings)
        layers: list[nn.Module] = []
        for size in hidden_sizes:
            layers += [nn.Linear(width, size), nn.LayerNorm(size), nn.ReLU(), Dropout(dropout)]
            width = size
        layers.append(nn.Linear(width, out_dim))
        self.mlp = nn.Sequential(*layers)

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> torch.Tensor:
        parts = [x_num] + [emb(x_cat[:, j]) for j, emb in enumerate(self.embeddings)]
        return self.mlp(torch.cat(parts, dim=1) if len(parts) > 1 else x_num)


@dataclass(frozen=True)
class NetSpec:
    """The network's shape: what the data gives (inputs, outputs) and the architecture parameters."""

    num_numeric: int
    cardinalities: tuple[int, ...]
    out_dim: int
    hidden_sizes: tuple[int, ...] = (256, 128)
    dropout: float = 0.1
    max_embedding_dim: int = 16

    def build(self) -> TabularMLP:
        return TabularMLP(
            self.num_numeric, list(self.cardinalities), self.out_dim, self.hidden_sizes, self.dropout,
            self.max_embedding_dim,
        )


def to_prediction(out: torch.Tensor, problem_type: str, y_scale=(0.0, 1.0)) -> np.ndarray:
    """Network outputs to what models return: class probabilities, or values on the label's scale."""
    if problem_type == "regression":
        return out.squeeze(1).double().cpu().numpy() * y_scale[1] + y_scale[0]
    return torch.softmax(out.float(), dim=1).double().cpu().numpy()
