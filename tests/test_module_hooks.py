"""ModuleHooks: one hook on many modules behaves as torch's own registration, and leaves nothing behind."""

import sys

import torch
from torch import nn

from xray_tb.module_hooks import ModuleHooks
from xray_tb.trace.tracer import trace


class _TwoInputs(nn.Module):
    def forward(self, x, *, scale=1.0):
        return x * scale


def _sizes(module: nn.Module) -> list[int]:
    return [sys.getsizeof(vars(module)[name]) for name in
            ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks", "_forward_hooks_with_kwargs")]


def test_hooks_run_in_torchs_order_with_their_arguments_and_are_removed_whole():
    model = nn.Sequential(nn.Linear(3, 4), _TwoInputs())
    calls = []
    model[1].register_forward_pre_hook(lambda m, args: calls.append("user pre"))
    model[1].register_forward_hook(lambda m, args, out: calls.append("user post"))
    fresh = [_sizes(nn.Linear(1, 1)), _sizes(nn.Linear(1, 1))]
    before = [(dict(m._forward_pre_hooks), dict(m._forward_hooks)) for m in model]

    hooks = ModuleHooks()
    hooks.pre(model, lambda m, args, kwargs: calls.append(("pre", type(m).__name__, kwargs)), with_kwargs=True, prepend=True)
    hooks.post(model, lambda m, args, kwargs, out: calls.append(("post", type(m).__name__, tuple(out.shape))), with_kwargs=True)
    assert hooks
    x = torch.randn(2, 3)
    model[1](model[0](x), scale=2.0)
    assert calls == [("pre", "Linear", {}), ("post", "Linear", (2, 4)),
                     ("pre", "_TwoInputs", {"scale": 2.0}), "user pre", "user post", ("post", "_TwoInputs", (2, 4))]

    hooks.remove()
    hooks.remove()  # idempotent
    assert not hooks
    assert [(dict(m._forward_pre_hooks), dict(m._forward_hooks)) for m in model] == before
    assert not model[1]._forward_pre_hooks_with_kwargs and not model[1]._forward_hooks_with_kwargs
    assert _sizes(model[0]) == fresh[0]  # the tables its entries grew are given back
    calls.clear()
    model(x)
    assert calls == ["user pre", "user post"]


def test_the_key_is_unique_against_torchs_own_handles():
    layer = nn.Linear(2, 2)
    hooks = ModuleHooks()
    hooks.post([layer], lambda m, args, out: None)
    handle = layer.register_forward_hook(lambda m, args, out: None)
    assert handle.id in layer._forward_hooks and len(layer._forward_hooks) == 2
    hooks.remove()
    assert list(layer._forward_hooks) == [handle.id]


def test_a_module_that_registers_hooks_its_own_way_gets_torchs_call():
    registered = []

    class Custom(nn.Linear):
        def register_forward_hook(self, hook, **kwargs):
            registered.append(kwargs)
            return super().register_forward_hook(hook, **kwargs)

    layer = Custom(2, 2)
    seen = []
    hooks = ModuleHooks()
    hooks.post([layer, nn.Linear(2, 2)], lambda m, args, out: seen.append(type(m).__name__))
    assert registered == [{"with_kwargs": False}]
    layer(torch.randn(1, 2))
    assert seen == ["Custom"]
    hooks.remove()
    assert not layer._forward_hooks


def test_a_trace_leaves_every_hook_table_as_small_as_before():
    model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3)])
    sizes = {name: _sizes(m) for name, m in model.named_modules()}
    trace(model, (torch.randn(2, 4),))
    assert {name: _sizes(m) for name, m in model.named_modules()} == sizes
