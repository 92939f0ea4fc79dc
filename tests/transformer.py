"""A 12-block GPT built from torch.nn, with hand-written multi-head attention (one ``Head`` module
per head, as in Karpathy's "Let's build GPT"), for the big-graph browser test and the tab bench.

Every head is a group of its own (query, key, value, dropout and five functional ops), so the
traced architecture has about 2,000 nodes and five levels of groups:
``blocks`` > ``blocks.<i>`` > ``blocks.<i>.sa`` > ``blocks.<i>.sa.heads.<h>``, and ``blocks.<i>.ffwd``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

BLOCKS, HEADS, WIDTH, CONTEXT, VOCAB = 12, 16, 64, 16, 65


class Head(nn.Module):
    """One head of causal self-attention."""

    def __init__(self, width: int, size: int, context: int) -> None:
        super().__init__()
        self.key = nn.Linear(width, size, bias=False)
        self.query = nn.Linear(width, size, bias=False)
        self.value = nn.Linear(width, size, bias=False)
        self.register_buffer("tril", torch.tril(torch.ones(context, context)))
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        k, q = self.key(x), self.query(x)
        weights = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
        weights = weights.masked_fill(self.tril[:t, :t] == 0, float("-inf"))
        weights = self.dropout(F.softmax(weights, dim=-1))
        return weights @ self.value(x)


class MultiHeadAttention(nn.Module):
    def __init__(self, width: int, heads: int, context: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList(Head(width, width // heads, context) for _ in range(heads))
        self.proj = nn.Linear(width, width)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(torch.cat([head(x) for head in self.heads], dim=-1)))


class Block(nn.Module):
    """LayerNorm -> attention -> residual add -> LayerNorm -> MLP (Linear, GELU, Linear) -> residual add."""

    def __init__(self, width: int, heads: int, context: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.sa = MultiHeadAttention(width, heads, context)
        self.ln2 = nn.LayerNorm(width)
        self.ffwd = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.sa(self.ln1(x))
        return x + self.ffwd(self.ln2(x))


class GPT(nn.Module):
    """Token and position embeddings, BLOCKS blocks, a final LayerNorm and the language-model head."""

    def __init__(
        self, blocks: int = BLOCKS, heads: int = HEADS, width: int = WIDTH, context: int = CONTEXT, vocab: int = VOCAB
    ) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, width)
        self.position_embedding = nn.Embedding(context, width)
        self.blocks = nn.Sequential(*[Block(width, heads, context) for _ in range(blocks)])
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.token_embedding(idx) + self.position_embedding(positions)
        return self.lm_head(self.ln_f(self.blocks(x)))


PLAN = {
    "token_embedding": {"weight": True},
    "blocks.0.sa.heads.0.query": {"weight": True, "output": True},
    "blocks.11.ffwd.0": {"weight": True},
    "lm_head": {"weight": True, "output": True},
}


def record_gpt(run_dir: Path, steps=(0, 1, 2), seed: int = 0) -> dict:
    """Trains a GPT on random tokens for ``steps[-1] + 1`` steps, recording PLAN at ``steps`` with the
    real recorder; returns the traced architecture."""
    from xray_tb import Xray

    torch.manual_seed(seed)
    model = GPT()
    g = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    example = torch.randint(0, VOCAB, (2, CONTEXT), generator=g)
    with Xray(model, example, logdir=str(run_dir), plan=PLAN) as xray:
        for step in range(steps[-1] + 1):
            tokens = torch.randint(0, VOCAB, (4, CONTEXT + 1), generator=g)
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            if step in steps:
                xray.take_graphs(step)
            optimizer.step()
        return xray.architecture
