"""Activation checkpointing (``torch.utils.checkpoint``): a checkpointed segment runs without grad in
the forward under ``use_reentrant=True`` and again, with grad, in backward; Xray records what the
layers returned and the gradients that reached them, as without checkpointing."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from xray_tb import HealthOptions, Xray, open_run
from xray_tb.schedules import at


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Checkpointed(nn.Module):
    """Three blocks, each checkpointed while training (``use_reentrant`` as given); ``twice``: the middle
    block's layer runs twice in its segment."""

    def __init__(self, reentrant: bool, twice: bool = False):
        super().__init__()
        self.inp, self.blocks, self.out = nn.Linear(8, 16), nn.ModuleList(Block() for _ in range(3)), nn.Linear(16, 4)
        self.reentrant, self.twice = reentrant, twice

    def segment(self, index, x):
        x = self.blocks[index](x)
        return self.blocks[index](x) if self.twice and index == 1 else x

    def forward(self, x):
        x = self.inp(x)
        for index in range(3):
            x = checkpoint(self.segment, index, x, use_reentrant=self.reentrant) if self.training else self.segment(index, x)
        return self.out(x)


def reference(model: Checkpointed, x: torch.Tensor, y: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Each block's ``fc`` output and its gradient, from the same weights without checkpointing (a copy
    of the model: Xray's hooks on it are inert)."""
    model = copy.deepcopy(model)
    outputs = {}

    def keep(name):
        def hook(module, args, output):
            output.retain_grad()
            outputs[name] = output

        return hook

    handles = [block.fc.register_forward_hook(keep(f"blocks.{i}.fc")) for i, block in enumerate(model.blocks)]
    model.eval()
    F.cross_entropy(model(x), y).backward()
    for handle in handles:
        handle.remove()
    return {name: (output.detach(), output.grad) for name, output in outputs.items()}


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_checkpointed_layers_record_their_outputs_and_gradients(tmp_path, reentrant):
    torch.manual_seed(0)
    model = Checkpointed(reentrant)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    plan = {f"blocks.{i}.fc": {"output": True, "grad": True} for i in range(3)}
    expected = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is reported missing
        with Xray(model, torch.randn(2, 8), logdir=str(tmp_path), every=3, plan=plan, health=False) as xray:
            for step in range(7):
                x, y = torch.randn(5, 8), torch.randint(0, 4, (5,))
                if step % 3 == 0:
                    expected[step] = reference(model, x, y)
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                xray.take_graphs(step)
                optimizer.step()
    run = open_run(tmp_path)
    assert run.records() == {name: {"output": [0, 3, 6], "grad": [0, 3, 6]} for name in plan}
    assert_frames_equal(run, expected)


def assert_frames_equal(run, expected: dict) -> None:
    """Every recorded output and grad frame equals the reference's values at its indices."""
    for step, layers in expected.items():
        for name, (output, grad) in layers.items():
            values, header = run.load(name, "output", step)
            np.testing.assert_allclose(values.numpy(), output[header.indices].numpy(), rtol=1e-6)
            values, header = run.load(name, "grad", step)
            np.testing.assert_allclose(values.numpy(), grad[header.indices].numpy(), rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_a_model_checkpointed_whole_records_its_layers_outputs_and_gradients(tmp_path, reentrant):
    """The recomputation runs the model's own forward again, inside backward: it is not a new forward.
    (Under ``use_reentrant=True`` the whole forward runs without grad, so the hooks know the training
    thread only from the first ``take_graphs()`` call on: the captures start after it.)"""
    torch.manual_seed(0)
    model = Checkpointed(reentrant=False)
    model.eval()  # no inner checkpoints: the loop checkpoints the whole model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    plan = {f"blocks.{i}.fc": {"output": True, "grad": True} for i in range(3)}
    expected = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Xray(model, torch.randn(2, 8), logdir=str(tmp_path), every=at([1, 3]), plan=plan, health=False) as xray:
            for step in range(4):
                x, y = torch.randn(5, 8), torch.randint(0, 4, (5,))
                if step % 2:
                    expected[step] = reference(model, x, y)
                optimizer.zero_grad()
                x.requires_grad_(reentrant)  # reentrant checkpointing needs an input that requires grad
                F.cross_entropy(checkpoint(model, x, use_reentrant=reentrant), y).backward()
                xray.take_graphs(step)
                optimizer.step()
    run = open_run(tmp_path)
    assert run.records() == {name: {"output": [1, 3], "grad": [1, 3]} for name in plan}
    assert_frames_equal(run, expected)


def test_dead_units_inside_a_reentrant_checkpoint_are_those_of_the_forward(tmp_path):
    torch.manual_seed(0)
    model = Checkpointed(reentrant=True)
    with torch.no_grad():  # unit 3 of the middle block never fires: its pre-activation stays below 0
        model.blocks[1].fc.weight[3] = 0.0
        model.blocks[1].fc.bias[3] = -1.0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # constant weights: the reference below is exact
    seen = []
    with Xray(model, torch.randn(2, 8), logdir=str(tmp_path), every=2, health=HealthOptions(dead_window=3)) as xray:
        for step in range(6):
            x = torch.randn(16, 8)
            seen += [x] if step % 2 == 0 else []
            optimizer.zero_grad()
            F.cross_entropy(model(x), torch.randint(0, 4, (16,))).backward()
            xray.take_graphs(step)
            optimizer.step()
        dead = xray.dead_units()
    outputs = {i: [] for i in range(3)}
    handles = [block.fc.register_forward_hook(lambda m, a, out, i=i: outputs[i].append(torch.relu(out))) for i, block in enumerate(model.blocks)]
    model.eval()
    with torch.no_grad():
        for x in seen:
            model(x)
    for handle in handles:
        handle.remove()
    expected = {f"blocks.{i}.fc": torch.nonzero(torch.cat(found).amax(dim=0) <= 0).flatten().tolist() for i, found in outputs.items()}
    assert 3 in expected["blocks.1.fc"]
    assert dead == {layer: units for layer, units in expected.items() if units}


def test_a_layer_run_twice_in_a_reentrant_segment_is_reported_not_misfiled(tmp_path):
    """Its recomputations cannot be told apart: nothing is recorded for it, not even what an earlier
    forward kept, and the warning says why; the layers around it are recorded."""
    torch.manual_seed(0)
    model = Checkpointed(reentrant=True, twice=True)
    plan = {"blocks.0.fc": {"output": True}, "blocks.1.fc": {"output": True}}
    with Xray(model, torch.randn(2, 8), logdir=str(tmp_path), every=1, plan=plan, health=False) as xray:
        model.eval()  # an earlier forward with grad, without checkpointing: it keeps every tapped output
        model(torch.randn(5, 8)).sum().backward()
        model.train()
        x = torch.randn(5, 8)
        expected = reference(model, x, torch.zeros(5, dtype=torch.long))["blocks.0.fc"][0]
        model(x).sum().backward()
        with pytest.warns(UserWarning, match=r"'blocks.1.fc' output: the layer ran more than once without grad.*use_reentrant=False"):
            xray.take_graphs(0)
    run = open_run(tmp_path)
    assert run.records() == {"blocks.0.fc": {"output": [0]}}
    values, header = run.load("blocks.0.fc", "output", 0)
    np.testing.assert_allclose(values.numpy(), expected[header.indices].numpy(), rtol=1e-6)
