"""A small CNN, its batches and training step, and a snapshot of a model's state, shared by the recorder tests."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(6 * 4 * 4, 20)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(20, 3)

    def forward(self, x):
        x = self.pool(self.relu(self.bn(self.conv(x))))
        return self.fc2(self.act(self.fc1(self.flatten(x))))


FULL = {"weight": True, "weight_grad": True, "bias": True, "bias_grad": True, "output": True, "activation": True, "grad": True}


def batch(seed=0, n=5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def train_step(model, x, y):
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss


def state_of(model):
    return {
        "params": {k: v.detach().clone() for k, v in model.named_parameters()},
        "buffers": {k: v.clone() for k, v in model.named_buffers()},
        "grads": {k: None if v.grad is None else v.grad.clone() for k, v in model.named_parameters()},
        "training": {k: m.training for k, m in model.named_modules()},
        "rng": torch.get_rng_state(),
    }


def assert_same_state(before, after):
    for group in ("params", "buffers"):
        assert before[group].keys() == after[group].keys()
        for key in before[group]:
            assert torch.equal(before[group][key], after[group][key]), (group, key)
    for key, grad in before["grads"].items():
        assert (grad is None) == (after["grads"][key] is None), key
        assert grad is None or torch.equal(grad, after["grads"][key]), key
    assert before["training"] == after["training"]
    assert torch.equal(before["rng"], after["rng"])
