"""The tabular MLP: an embedding per categorical column, concatenated with the numeric inputs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pipeline.nn.options import embedding_dim


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
            layers += [nn.Linear(width, size), nn.LayerNorm(size), nn.ReLU(), nn.Dropout(dropout)]
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
