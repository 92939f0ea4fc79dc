"""A small CNN, its batches and training step, a tiny conv net and its training loop on 6x6 batches,
and a snapshot of a model's state, shared by the tests."""

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
        # torch's .numpy() marks a storage as never to be resized (FSDP resizes its parameters' storages)
        "resizable": {k: (v.untyped_storage().resizable(), v.grad is None or v.grad.untyped_storage().resizable())
                      for k, v in [*model.named_parameters(), *model.named_buffers()]},
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
    assert before["resizable"] == after["resizable"]


def tiny_model():
    """Conv (4 filters) -> ReLU -> Flatten -> Linear(144, 3), seeded, for 1x6x6 inputs."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


def train_on_6x6(model, optimizer, generator, steps, after_backward):
    """One optimizer step per step in ``steps``, on a random 8x1x6x6 batch of 3 classes drawn from
    ``generator``; ``after_backward(step)`` runs between the backward and the optimizer step, where
    ``take_graphs()`` goes."""
    for step in steps:
        x, y = torch.randn(8, 1, 6, 6, generator=generator), torch.randint(0, 3, (8,), generator=generator)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        after_backward(step)
        optimizer.step()
