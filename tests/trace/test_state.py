"""Tracing (and the probe forward) leave the model as it was; writes through views of a layer's output are seen."""

from __future__ import annotations

import gc
import weakref
from typing import Callable

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from xray_tb import Xray
from xray_tb.trace.graph import Graph, Tap
from xray_tb.trace.tracer import trace

# ----------------------------------------------------------------------------- models with state in forward


class RegistersBuffer(nn.Module):
    """Registers a buffer of the batch mean inside ``forward`` (values drawn from the trace's batch)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        self.register_buffer("seen_mean", x.detach().mean(0))
        return self.fc(x)


class RemembersOutputs(nn.Module):
    """Sets attributes in forward: the output, a counter, a replaced cache; a user hook saves an output."""

    def __init__(self, created: list):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.head = nn.Linear(3, 2)
        self.calls = 0
        self.cache = {"kept": "before"}
        self.history = []  # appended to in place: a shallow restore keeps the append (documented)
        self.created = created  # weakrefs to tensors made in forward, held outside the model
        self.head.register_forward_hook(lambda module, args, output: setattr(module, "saved", output))

    def forward(self, x):
        y = self.fc(x)
        self.last = y
        self.calls += 1
        self.cache = {"y": y}
        self.history.append(self.calls)
        self.created.append(weakref.ref(y))
        return self.head(torch.relu(y))


class AddsParameterLazily(nn.Module):
    """Adds a parameter and a submodule the first time ``forward`` runs."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        if not hasattr(self, "scale"):
            self.scale = nn.Parameter(torch.randn(3))
            self.extra = nn.Linear(3, 3)
        return self.extra(self.fc(x) * self.scale)


def _snapshot(model: nn.Module) -> dict:
    """What must be the same objects after Xray ran a forward: attributes, registries, state_dict keys."""
    return {
        "state_dict": list(model.state_dict()),
        "parameters": [(name, id(p)) for name, p in model.named_parameters()],
        "buffers": [(name, id(b), b.clone()) for name, b in model.named_buffers()],
        "modules": [(name, id(m), type(m)) for name, m in model.named_modules()],
        "attributes": {name: dict(vars(m)) for name, m in model.named_modules()},
        "registries": {name: _registries(m) for name, m in model.named_modules()},
    }


def _registries(module: nn.Module) -> dict:
    """Copies of the module's dict and set attributes (its parameter, buffer, module and hook registries)."""
    return {key: type(value)(value) for key, value in vars(module).items() if isinstance(value, (dict, set))}


def _assert_untouched(model: nn.Module, before: dict, xray_hooks: tuple = ()) -> None:
    """``xray_hooks``: the root's hook registries a live Xray may hold a hook in (left out here)."""
    after = _snapshot(model)
    assert after["state_dict"] == before["state_dict"]
    assert after["parameters"] == before["parameters"]
    assert [buffer[:2] for buffer in after["buffers"]] == [buffer[:2] for buffer in before["buffers"]]
    for (name, _, value), (_, _, old) in zip(after["buffers"], before["buffers"]):
        assert torch.equal(value, old), name
    assert after["modules"] == before["modules"]
    for name, attributes in before["attributes"].items():
        current = after["attributes"][name]
        assert current.keys() == attributes.keys(), name
        for key, value in attributes.items():
            assert current[key] is value, (name, key)  # the same object, registries included
    for name, registries in before["registries"].items():
        for key, value in registries.items():
            if name == "" and key in xray_hooks:
                continue
            current = after["registries"][name][key]
            if isinstance(value, dict):
                assert list(current) == list(value) and all(current[k] is value[k] for k in value), (name, key)
            else:
                assert current == value, (name, key)


@pytest.mark.parametrize("model_cls", [RegistersBuffer, AddsParameterLazily], ids=lambda cls: cls.__name__)
def test_trace_removes_what_forward_registered(model_cls):
    torch.manual_seed(0)
    model = model_cls()
    before = _snapshot(model)
    trace(model, (torch.randn(5, 4),))
    _assert_untouched(model, before)
    assert not hasattr(model, "seen_mean") and not hasattr(model, "scale") and not hasattr(model, "extra")


def test_xray_construction_removes_a_buffer_registered_in_forward(tmp_path):
    model = RegistersBuffer()
    before = _snapshot(model)
    with Xray(model, torch.randn(5, 4), logdir=str(tmp_path), plan={"fc": {"weight": True}}):  # a plan of no hooks
        # but training health's watch for checkpoints loaded into the model (health/reloads.py) and its
        # pre-hook that keeps each training forward's inputs until the check (health/forward_replay.py)
        assert len(model._load_state_dict_post_hooks) == 1 and len(model._forward_pre_hooks) == 1
        _assert_untouched(model, before, xray_hooks=("_load_state_dict_post_hooks", "_forward_pre_hooks",
                                                     "_forward_pre_hooks_with_kwargs"))
    assert "seen_mean" not in model.state_dict()
    _assert_untouched(model, before)  # closed: nothing of Xray's left


def test_trace_restores_attributes_and_keeps_none_of_its_tensors():
    created: list = []
    model = RemembersOutputs(created)
    model.head.saved = "hook saved nothing yet"
    history, cache = model.history, model.cache
    before = _snapshot(model)
    arch = trace(model, (torch.randn(5, 4),))
    _assert_untouched(model, before)
    assert model.calls == 0 and model.cache is cache and cache == {"kept": "before"}
    assert model.head.saved == "hook saved nothing yet" and not hasattr(model, "last")
    assert len(model.head._forward_hooks) == 1  # the user's hook stays, the tracer's are gone
    assert model.history is history and history == [1]  # in-place change of a kept object: not undone
    assert len(created) == 1 and created[0]() is None  # the forward's tensor (and its graph) died with the trace
    assert [n["id"] for n in arch["nodes"] if n["kind"] == "module"] == ["module:fc:0", "module:head:0"]


def test_xray_and_its_probe_leave_attributes_and_hold_no_forward_tensor(tmp_path):
    created: list = []
    model = RemembersOutputs(created)
    x, probe_x, probe_y = torch.randn(5, 4), torch.randn(3, 4), torch.tensor([0, 1, 0])
    plan = {"fc": {"output": True, "grad": True}}
    with Xray(model, x, logdir=str(tmp_path), plan=plan, probe=(probe_x, probe_y), loss_fn=F.cross_entropy) as xray:
        assert model.calls == 0 and not hasattr(model, "last") and created[0]() is None  # the trace's forward
        model(x).sum().backward()  # a training forward: its attributes are the user's, kept
        assert model.calls == 1 and model.last is not None
        before = _snapshot(model)
        xray.take_graphs(0, probe=True)
        _assert_untouched(model, before)  # the probe's forward left nothing
        assert model.calls == 1 and created[-1]() is None
        values, _ = xray.load("fc", "output", 0)
    torch.testing.assert_close(values, model.fc(probe_x).detach())


def test_lazy_modules_stay_materialised_without_the_trace_batch_statistics():
    x = torch.randn(6, 5)
    torch.manual_seed(3)
    model = nn.Sequential(nn.LazyLinear(3), nn.LazyBatchNorm1d()).train()
    arch = trace(model, (x,))
    assert [type(m) for m in model] == [nn.Linear, nn.BatchNorm1d]  # as the first forward leaves them
    assert [n["params"] for n in arch["nodes"] if n["kind"] == "module"] == [18, 6]
    assert model[0].weight.shape == (3, 5) and not model[0]._forward_pre_hooks and not model[1]._forward_pre_hooks
    assert torch.equal(model[1].running_mean, torch.zeros(3)) and torch.equal(model[1].running_var, torch.ones(3))
    assert model[1].num_batches_tracked.item() == 0  # the trace's batch left no statistics
    torch.manual_seed(3)
    twin = nn.Sequential(nn.LazyLinear(3), nn.LazyBatchNorm1d()).train()
    twin(x)  # the same materialisation, from the same random stream
    torch.testing.assert_close(model[0].weight, twin[0].weight)
    torch.testing.assert_close(model(x), twin(x))  # and the same model from now on
    assert trace(model, (x,)) == arch


# ----------------------------------------------------------------------------- writes through views


class UseOnceBlock(nn.Module):
    """In place: adds one to its input, with no ``inplace`` attribute (the tracer sees no in-place op)."""

    def forward(self, x):
        return x.add_(1)


VIEW_WRITES: dict[str, Callable[[torch.Tensor], None]] = {
    "t().mul_(0).add_(42)": lambda y: y.t().mul_(0).add_(42),
    "unsqueeze(0).copy_(z)": lambda y: y.unsqueeze(0).copy_(torch.full((1, *y.shape), 42.0)),
    "view(-1)[0:3] = 7": lambda y: y.view(-1).__setitem__(slice(0, 3), 7),
    "[:, 0].zero_()": lambda y: y[:, 0].zero_(),
    "transpose(0, 1).add_(1)": lambda y: y.transpose(0, 1).add_(1),
}


class WritesIntoOutput(nn.Module):
    def __init__(self, write: Callable[[torch.Tensor], None] | None):
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.head = nn.Linear(3, 2)
        self.write = write

    def forward(self, x):
        y = self.linear(x)
        if self.write is not None:
            self.write(y)
        return self.head(y)


def _module_nodes(arch: dict) -> dict[str, dict]:
    return {node["id"]: node for node in arch["nodes"] if node["kind"] == "module"}


@pytest.mark.parametrize("write", VIEW_WRITES.values(), ids=VIEW_WRITES.keys())
def test_a_write_through_a_view_marks_the_layer(write):
    arch = trace(WritesIntoOutput(write), (torch.randn(5, 4),))
    nodes = _module_nodes(arch)
    assert nodes["module:linear:0"].get("mutated_after") is True
    assert "mutated_after" not in nodes["module:head:0"]
    assert Graph(arch).overwritten_in_place(Tap("linear"))
    assert not Graph(arch).overwritten_in_place(Tap("head"))
    del nodes["module:linear:0"]["mutated_after"]
    assert not Graph(arch).overwritten_in_place(Tap("linear"))  # no in-place successor: the version told


def test_a_write_inside_a_later_module_call_marks_the_layer():
    model = nn.Sequential(nn.Linear(4, 3), UseOnceBlock(), nn.Linear(3, 2))
    nodes = _module_nodes(trace(model, (torch.randn(5, 4),)))
    assert nodes["module:0:0"].get("mutated_after") is True
    assert nodes["module:1:0"].get("mutated_after") is None and nodes["module:2:0"].get("mutated_after") is None


def test_no_write_no_mark():
    model = nn.Sequential(WritesIntoOutput(None), nn.ReLU(), nn.Linear(2, 2))
    arch = trace(model, (torch.randn(5, 4),))
    assert not [node["id"] for node in arch["nodes"] if "mutated_after" in node]
    graph = Graph(arch)
    assert not any(graph.overwritten_in_place(Tap(name)) for name in ("0.linear", "0.head", "1", "2"))


@pytest.mark.parametrize("write", VIEW_WRITES.values(), ids=VIEW_WRITES.keys())
def test_recorded_output_is_what_the_layer_returned(tmp_path, write):
    torch.manual_seed(0)
    model, x = WritesIntoOutput(write), torch.randn(5, 4)
    with Xray(model, x, logdir=str(tmp_path), plan={"linear": {"output": True}}) as xray:
        model(x).sum().backward()
        xray.take_graphs(0)
        assert xray.last_report.missing == []
        values, _ = xray.load("linear", "output", 0)
    returned = model.linear(x).detach()
    torch.testing.assert_close(values, returned)
    overwritten = returned.clone()
    write(overwritten)
    assert not torch.equal(values, overwritten)  # not the values written after the layer returned


def test_construction_pauses_the_cyclic_collector_and_restores_it_as_it_was(tmp_path):
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.append(gc.isenabled()))
    assert gc.isenabled()
    Xray(model, torch.randn(2, 4), logdir=str(tmp_path / "a")).close()
    assert gc.isenabled() and seen and not any(seen)  # paused while tracing, back on after
    gc.disable()
    try:
        Xray(model, torch.randn(2, 4), logdir=str(tmp_path / "b")).close()
        assert not gc.isenabled()  # a user's choice is left alone
    finally:
        gc.enable()
    with pytest.raises(ValueError):
        Xray(model, torch.randn(2, 5), logdir=str(tmp_path / "c"))  # tracing fails: the wrong width
    assert gc.isenabled()
