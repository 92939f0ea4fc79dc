"""Random graph models for the big-model bench, after the idea of TorchLens's scale-test models: a
seeded random mix of four small block shapes, nested a few levels deep, sized to a target number of
graph nodes (modules and functional ops). Written for this bench; no code is taken from TorchLens.

Block shapes (nodes each, as Xray's tracer counts them: modules and functional ops):

* chain:     Linear -> ReLU -> Linear                                   (3)
* residual:  Linear -> GELU -> Linear, plus the input (an ``add``)      (4)
* fan-out:   three Linear + activation branches -> ``cat`` -> Linear    (8)
* attention: q, k, v projections, ``matmul``, scale, ``softmax``,
             ``matmul``, output projection (the batch as the sequence)  (9)
"""

from __future__ import annotations

import random

import torch
from torch import nn


class _Chain(nn.Module):
    NODES = 3

    def __init__(self, width: int):
        super().__init__()
        self.inp, self.act, self.out = nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width)

    def forward(self, x):
        return self.out(self.act(self.inp(x)))


class _Residual(_Chain):
    NODES = 4

    def __init__(self, width: int):
        super().__init__(width)
        self.act = nn.GELU()

    def forward(self, x):
        return x + super().forward(x)


class _FanOut(nn.Module):
    NODES = 8

    def __init__(self, width: int):
        super().__init__()
        self.branches = nn.ModuleList(nn.Sequential(nn.Linear(width, width), act()) for act in (nn.ReLU, nn.Tanh, nn.Sigmoid))
        self.merge = nn.Linear(3 * width, width)

    def forward(self, x):
        return self.merge(torch.cat([branch(x) for branch in self.branches], dim=-1))


class _Attention(nn.Module):
    NODES = 9

    def __init__(self, width: int):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(width, width) for _ in range(4))
        self.scale = width ** -0.5

    def forward(self, x):
        weights = torch.softmax(torch.matmul(self.q(x), self.k(x).transpose(-2, -1)) * self.scale, dim=-1)
        return self.o(torch.matmul(weights, self.v(x)))


class RandomGraphModel(nn.Module):
    """About ``nodes`` graph nodes of random blocks (``branching``: the share of fan-out and
    attention blocks), split into ``depth`` nested groups; deterministic for a ``seed``."""

    def __init__(self, nodes: int, width: int = 64, depth: int = 2, branching: float = 0.3, seed: int = 0):
        super().__init__()
        rng = random.Random(seed)
        simple, branched = (_Chain, _Residual), (_FanOut, _Attention)
        mean = (1 - branching) * sum(b.NODES for b in simple) / 2 + branching * sum(b.NODES for b in branched) / 2
        count = max(1, round((nodes - 1) / mean))
        blocks = [rng.choice(branched if rng.random() < branching else simple)(width) for _ in range(count)]
        self.stem = nn.Linear(width, width)
        size = max(1, -(-count // max(1, depth)))
        self.groups = nn.ModuleList(nn.ModuleList(blocks[i:i + size]) for i in range(0, count, size))

    def forward(self, x):
        x = self.stem(x)
        for group in self.groups:
            for block in group:
                x = block(x)
        return x
