"""Exact graph facts, the autograd mapping both ways, and no side effects of ``trace``."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from torch import nn

from tests import models
from xray_tb.trace.summary_table import summary_table
from xray_tb.trace.tracer import trace

SMALL_MODELS = [
    models.NestedSequential,
    models.FunctionalNet,
    models.ResidualNet,
    models.TinyUNet,
    models.ReusedModule,
    models.ParamFreeModules,
    models.InplaceReluNet,
    models.InplaceOps,
    models.ConvBnRelu,
    models.LSTMClassifier,
    models.TinyTransformer,
    models.DictOutput,
    models.TupleOutput,
    models.NoGradSection,
    models.UnusedModule,
    models.LeNetDigits,
]


def _traced(model_cls: type[nn.Module]) -> tuple[nn.Module, dict]:
    """A seeded instance of ``model_cls`` and its trace on its example input."""
    torch.manual_seed(0)
    model = model_cls()
    return model, trace(model, (model_cls.example_input(),))


def _node(arch: dict, node_id: str) -> dict:
    """The node with id ``node_id``."""
    return next(node for node in arch["nodes"] if node["id"] == node_id)


def _ids(arch: dict) -> list[str]:
    """Node ids in execution order."""
    return [node["id"] for node in arch["nodes"]]


def _sources(arch: dict, node_id: str) -> list[str]:
    """Ids of the nodes with an edge into ``node_id``, in edge order."""
    return [edge["src"] for edge in arch["edges"] if edge["dst"] == node_id]


def _targets(arch: dict, node_id: str) -> list[str]:
    """Ids of the nodes with an edge from ``node_id``, in edge order."""
    return [edge["dst"] for edge in arch["edges"] if edge["src"] == node_id]


def _attributed(arch: dict) -> set[tuple[str, str]]:
    """(autograd name, node id) pairs of ``by_autograd``."""
    return {(entry["name"], entry["node"]) for entry in arch["autograd"]["by_autograd"]}


def _reachable_grad_fns(outputs: list[torch.Tensor]) -> Counter:
    """Names of every autograd node reachable from the outputs' grad_fns (independent walk)."""
    seen: set = set()
    stack = [t.grad_fn for t in outputs if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is not None and fn not in seen:
            seen.add(fn)
            stack.extend(next_fn for next_fn, _ in fn.next_functions)
    return Counter(type(fn).__name__ for fn in seen)


# ----------------------------------------------------------------------------- schema


@pytest.mark.parametrize("model_cls", SMALL_MODELS, ids=lambda cls: cls.__name__)
def test_schema_is_consistent_and_json(model_cls: type[nn.Module]) -> None:
    model, arch = _traced(model_cls)
    assert json.loads(json.dumps(arch)) == arch
    assert set(arch) == {"nodes", "edges", "groups", "autograd"}
    ids = _ids(arch)
    assert len(ids) == len(set(ids))
    position = {node_id: index for index, node_id in enumerate(ids)}
    for edge in arch["edges"]:
        assert position[edge["src"]] < position[edge["dst"]], edge  # execution order
    names = dict(model.named_modules())
    groups = {group["module"] for group in arch["groups"]}
    common = {"id", "kind", "in_shapes", "out_shapes", "parent"}
    for node in arch["nodes"]:
        assert node["parent"] in groups | {""}
        if node["kind"] == "module":
            assert node["id"] == f"module:{node['module']}:{node['call']}"
            assert node["type"] == type(names[node["module"]]).__name__
            assert node["params"] == sum(p.numel() for p in names[node["module"]].parameters())
            assert set(node) - common <= {"module", "type", "call", "params", "inplace", "mutated_after"}
            assert node.get("mutated_after", True) is True  # present only when set
        elif node["kind"] == "function":
            assert node["id"].startswith(f"function:{node['op']}:")
            assert set(node) - common == {"op", "kwargs"}
        else:
            assert set(node) == common
            assert len(node["out_shapes" if node["kind"] == "input" else "in_shapes"]) == 1
            assert node["in_shapes" if node["kind"] == "input" else "out_shapes"] == []
    for group in arch["groups"]:
        assert group["type"] == type(names[group["module"]]).__name__
        assert group["parent"] in groups | {""}
    assert set(arch["autograd"]["by_node"]) <= set(ids)
    assert {entry["node"] for entry in arch["autograd"]["by_autograd"]} <= set(ids)


def test_trace_is_deterministic() -> None:
    model = models.TinyTransformer()
    x = models.TinyTransformer.example_input()
    assert trace(model, (x,)) == trace(model, (x,))


def test_nested_sequential_groups_and_parents() -> None:
    _, arch = _traced(models.NestedSequential)
    assert _ids(arch) == [
        "input:0",
        "module:features.0:0",
        "module:features.1:0",
        "module:head.0:0",
        "module:head.1.0:0",
        "module:head.1.1:0",
        "output:0",
    ]
    assert arch["groups"] == [
        {"module": "features", "type": "Sequential", "parent": ""},
        {"module": "head", "type": "Sequential", "parent": ""},
        {"module": "head.1", "type": "Sequential", "parent": "head"},
    ]
    assert [node["parent"] for node in arch["nodes"]] == ["", "features", "features", "head", "head.1", "head.1", ""]
    assert _sources(arch, "module:features.0:0") == ["input:0"]
    assert _sources(arch, "module:head.0:0") == ["module:features.1:0"]
    assert _sources(arch, "output:0") == ["module:head.1.1:0"]


def test_functional_ops_with_kwargs_inside_custom_block() -> None:
    _, arch = _traced(models.FunctionalNet)
    functions = [node for node in arch["nodes"] if node["kind"] == "function"]
    assert [(node["op"], node["kwargs"]) for node in functions] == [
        ("relu", {"inplace": False}),
        ("gelu", {"approximate": "none"}),
        ("leaky_relu", {"negative_slope": 0.2, "inplace": False}),
        ("sigmoid", {}),
        ("tanh", {}),
        ("softmax", {"dim": 1}),
    ]
    assert all(node["parent"] == "block" and node["out_shapes"] == [[2, 8]] for node in functions)
    assert arch["groups"] == [{"module": "block", "type": "FunctionalBlock", "parent": ""}]
    chain = ["module:block.fc:0", *(node["id"] for node in functions), "module:head:0"]
    assert [_targets(arch, a) for a in chain[:-1]] == [[b] for b in chain[1:]]
    assert arch["autograd"]["by_node"]["function:leaky_relu:0"] == "LeakyReluBackward0"
    assert arch["autograd"]["by_node"]["function:softmax:0"] == "SoftmaxBackward0"


def test_residual_add_has_both_branches() -> None:
    _, arch = _traced(models.ResidualNet)
    assert _node(arch, "function:add:0")["in_shapes"] == [[2, 4, 8, 8], [2, 4, 8, 8]]
    assert _sources(arch, "function:add:0") == ["module:block.bn2:0", "module:stem:0"]
    assert _targets(arch, "module:stem:0") == ["module:block.conv1:0", "function:add:0"]
    assert _targets(arch, "function:add:0") == ["function:relu:0"]
    assert _node(arch, "function:add:0")["parent"] == "block"
    assert _sources(arch, "function:flatten:0") == ["module:pool:0"]
    assert _node(arch, "function:flatten:0")["kwargs"] == {"start_dim": 1, "end_dim": -1}
    assert arch["autograd"]["by_node"]["function:add:0"] == "AddBackward0"


def test_unet_cat_has_two_incoming_edges() -> None:
    _, arch = _traced(models.TinyUNet)
    cat = _node(arch, "function:cat:0")
    assert cat["kwargs"] == {"dim": 1}
    assert cat["in_shapes"] == [[1, 4, 8, 8], [1, 4, 8, 8]] and cat["out_shapes"] == [[1, 8, 8, 8]]
    assert _sources(arch, "function:cat:0") == ["module:up:0", "module:enc.1:0"]
    assert _targets(arch, "module:enc.1:0") == ["module:down:0", "function:cat:0"]
    assert _targets(arch, "function:cat:0") == ["module:dec.0:0"]


def test_reused_module_is_one_node_per_call() -> None:
    _, arch = _traced(models.ReusedModule)
    assert _ids(arch) == ["input:0", "module:fc:0", "function:relu:0", "module:fc:1", "output:0"]
    assert (_node(arch, "module:fc:0")["call"], _node(arch, "module:fc:1")["call"]) == (0, 1)
    assert _sources(arch, "module:fc:1") == ["function:relu:0"]
    assert _sources(arch, "function:relu:0") == ["module:fc:0"]
    by_autograd = [(e["name"], e["node"]) for e in arch["autograd"]["by_autograd"]]
    assert Counter(by_autograd) == Counter(
        {
            ("AddmmBackward0", "module:fc:1"): 1,
            ("TBackward0", "module:fc:1"): 1,
            ("ReluBackward0", "function:relu:0"): 1,
            ("AddmmBackward0", "module:fc:0"): 1,
            ("TBackward0", "module:fc:0"): 1,
            ("AccumulateGrad", "module:fc:0"): 2,  # weight and bias, shared: the first call owns them
        }
    )


def test_parameter_free_modules_are_nodes() -> None:
    _, arch = _traced(models.ParamFreeModules)
    modules = [node for node in arch["nodes"] if node["kind"] == "module"]
    assert [(n["module"], n["type"], n["params"]) for n in modules] == [
        ("conv", "Conv2d", 20),
        ("maxpool", "MaxPool2d", 0),
        ("avgpool", "AvgPool2d", 0),
        ("identity", "Identity", 0),
        ("flatten", "Flatten", 0),
        ("fc", "Linear", 18),
    ]
    assert [n["out_shapes"] for n in modules] == [
        [[1, 2, 8, 8]],
        [[1, 2, 4, 4]],
        [[1, 2, 2, 2]],
        [[1, 2, 2, 2]],
        [[1, 8]],
        [[1, 2]],
    ]
    assert _sources(arch, "module:flatten:0") == ["module:identity:0"]  # Identity returns its input object


def test_inplace_relu_module_follows_conv() -> None:
    _, arch = _traced(models.InplaceReluNet)
    assert _ids(arch) == ["input:0", "module:conv:0", "module:relu:0", "function:flatten:0", "module:fc:0", "output:0"]
    relu = _node(arch, "module:relu:0")
    assert relu["inplace"] is True and relu["type"] == "ReLU"
    assert _sources(arch, "module:relu:0") == ["module:conv:0"]
    assert _targets(arch, "module:conv:0") == ["module:relu:0"]
    assert _sources(arch, "function:flatten:0") == ["module:relu:0"]
    assert arch["autograd"]["by_node"]["module:conv:0"] == "ConvolutionBackward0"
    assert arch["autograd"]["by_node"]["module:relu:0"] == "ReluBackward0"


class _PassThroughs(nn.Module):
    """Calls that hand back their input untouched: an Identity shortcut called first, an eval-mode
    Dropout, an Identity on a tensor used again, and no-op tensor methods."""

    def __init__(self):
        super().__init__()
        self.shortcut, self.idt, self.drop = nn.Identity(), nn.Identity(), nn.Dropout(0.5)
        self.f, self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        sc = self.shortcut(x)
        h = self.f(x) + sc                      # f reads x, the add reads the shortcut
        h = h + self.idt(h)                     # the add reads h and the Identity
        d = self.drop(h)
        y = self.a(h) * self.b(d)               # a reads h, b the Dropout
        z = h.contiguous().float()
        y = y + self.c(z) + self.a(h)           # c reads float(contiguous(h)); a (again) reads h
        return self.relu(y)                     # in place: still the producer of what it wrote


def test_a_call_that_returns_its_input_untouched_takes_over_no_edge() -> None:
    model = _PassThroughs().eval()
    x = torch.randn(2, 4)
    expected = model(x)
    arch = trace(model, (x,))
    edges = {(e["src"], e["dst"]) for e in arch["edges"]}
    assert ("input:0", "module:f:0") in edges and ("module:shortcut:0", "function:add:0") in edges
    assert ("module:shortcut:0", "module:f:0") not in edges
    assert {("function:add:0", "function:add:1"), ("module:idt:0", "function:add:1")} <= edges
    assert ("function:add:1", "module:a:0") in edges and ("module:drop:0", "module:b:0") in edges
    assert ("module:drop:0", "module:a:0") not in edges
    assert [("function:add:1", "function:contiguous:0"), ("function:contiguous:0", "function:float:0"),
            ("function:float:0", "module:c:0")] == [e for e in sorted(edges) if "contiguous" in "".join(e) or e[1] == "module:c:0"]
    assert ("function:add:1", "module:a:1") in edges and ("function:float:0", "module:a:1") not in edges
    assert _sources(arch, "output:0") == ["module:relu:0"]
    assert torch.equal(model(x), expected)  # the views were the tracing forward's only


def test_inplace_tensor_ops_rewire_the_tensor() -> None:
    _, arch = _traced(models.InplaceOps)
    assert _ids(arch) == [
        "input:0",
        "module:fc:0",
        "function:relu:0",
        "function:mul:0",
        "function:setitem:0",
        "output:0",
    ]
    assert _node(arch, "function:relu:0")["kwargs"] == {"inplace": True}
    assert _node(arch, "function:mul:0")["kwargs"] == {"other": 2, "inplace": True}
    assert _node(arch, "function:setitem:0")["kwargs"]["inplace"] is True
    assert _sources(arch, "function:mul:0") == ["function:relu:0"]
    assert _sources(arch, "output:0") == ["function:setitem:0"]


def test_conv_bn_relu_view_dropout() -> None:
    _, arch = _traced(models.ConvBnRelu)
    assert _ids(arch) == [
        "input:0",
        "module:features.0:0",
        "module:features.1:0",
        "module:features.2:0",
        "function:view:0",
        "module:dropout:0",
        "module:fc:0",
        "output:0",
    ]
    assert _node(arch, "function:view:0")["kwargs"] == {"shape": [4, -1]}
    assert [_node(arch, f"module:features.{i}:0")["type"] for i in range(3)] == ["Conv2d", "BatchNorm2d", "ReLU"]
    assert arch["autograd"]["by_node"]["module:features.1:0"] == "NativeBatchNormBackward0"


def test_lstm_is_one_node_with_tuple_shapes() -> None:
    _, arch = _traced(models.LSTMClassifier)
    assert _ids(arch) == ["input:0", "module:lstm:0", "function:getitem:0", "module:fc:0", "output:0"]
    lstm = _node(arch, "module:lstm:0")
    assert lstm["out_shapes"] == [[2, 5, 6], [1, 2, 6], [1, 2, 6]]
    assert lstm["params"] == 4 * 6 * (3 + 6 + 2)
    assert _node(arch, "function:getitem:0")["out_shapes"] == [[2, 6]]
    assert _sources(arch, "function:getitem:0") == ["module:lstm:0"]
    assert Counter(e["node"] for e in arch["autograd"]["by_autograd"] if e["name"] == "AccumulateGrad") == {
        "module:lstm:0": 4,
        "module:fc:0": 2,
    }


def test_transformer_layer_is_a_group_and_attention_is_atomic() -> None:
    _, arch = _traced(models.TinyTransformer)
    assert arch["groups"] == [{"module": "encoder", "type": "TransformerEncoderLayer", "parent": ""}]
    inside = [(node["id"], node["parent"]) for node in arch["nodes"] if node["parent"] == "encoder"]
    assert [node_id for node_id, _ in inside] == [
        "module:encoder.self_attn:0",
        "module:encoder.dropout1:0",
        "function:add:0",
        "module:encoder.norm1:0",
        "module:encoder.linear1:0",
        "function:relu:0",
        "module:encoder.dropout:0",
        "module:encoder.linear2:0",
        "module:encoder.dropout2:0",
        "function:add:1",
        "module:encoder.norm2:0",
    ]
    attention = _node(arch, "module:encoder.self_attn:0")
    assert attention["type"] == "MultiheadAttention" and attention["params"] == 4 * 8 * 8 + 4 * 8
    assert attention["out_shapes"] == [[2, 4, 8]]  # (output, None): the None is omitted
    assert _sources(arch, "module:encoder.self_attn:0") == ["module:embed:0"]
    assert _sources(arch, "function:add:0") == ["module:embed:0", "module:encoder.dropout1:0"]
    assert _node(arch, "function:mean:0")["kwargs"] == {"dim": 1}
    owners = Counter(e["node"] for e in arch["autograd"]["by_autograd"] if e["name"] == "AccumulateGrad")
    assert owners["module:encoder.self_attn:0"] == 4  # in_proj weight/bias and out_proj weight/bias


@pytest.mark.parametrize("model_cls", [models.DictOutput, models.TupleOutput], ids=lambda cls: cls.__name__)
def test_dict_and_tuple_outputs_become_output_nodes(model_cls: type[nn.Module]) -> None:
    _, arch = _traced(model_cls)
    dict_output = model_cls is models.DictOutput
    heads = ["module:head:0", "module:body:0"] if dict_output else ["module:head_a:0", "module:head_b:0"]
    assert [node["id"] for node in arch["nodes"] if node["kind"] == "output"] == ["output:0", "output:1"]
    assert [_sources(arch, "output:0"), _sources(arch, "output:1")] == [[heads[0]], [heads[1]]]


def test_no_grad_section_is_traced_without_grad_fn() -> None:
    _, arch = _traced(models.NoGradSection)
    assert _ids(arch) == ["input:0", "module:frozen:0", "function:relu:0", "module:fc:0", "output:0"]
    assert _sources(arch, "module:fc:0") == ["function:relu:0"]
    assert arch["autograd"]["by_node"] == {"module:fc:0": "AddmmBackward0"}
    assert {e["node"] for e in arch["autograd"]["by_autograd"]} == {"module:fc:0"}


def test_module_never_called_is_absent() -> None:
    _, arch = _traced(models.UnusedModule)
    assert _ids(arch) == ["input:0", "module:used:0", "output:0"]
    assert not any("unused" in json.dumps(part) for part in arch.values())


#: The modules LeNetDigits calls, in order.
LENET_CALLS = ["conv1", "relu1", "pool1", "conv2", "relu2", "pool2", "flatten", "fc1", "relu3", "fc2", "relu4", "fc3"]


def test_lenet_digits_activation_follows_each_layer() -> None:
    model, arch = _traced(models.LeNetDigits)
    modules = [node["module"] for node in arch["nodes"] if node["kind"] == "module"]
    assert modules == LENET_CALLS
    following = {layer: _targets(arch, f"module:{layer}:0") for layer in ("conv1", "conv2", "fc1", "fc2")}
    assert following == {
        "conv1": ["module:relu1:0"],
        "conv2": ["module:relu2:0"],
        "fc1": ["module:relu3:0"],
        "fc2": ["module:relu4:0"],
    }
    assert _node(arch, "module:pool2:0")["out_shapes"] == [[2, 16, 2, 2]]
    assert _node(arch, "module:fc3:0")["out_shapes"] == [[2, 10]]
    assert sum(node["params"] for node in arch["nodes"] if node["kind"] == "module") == sum(
        p.numel() for p in model.parameters()
    )


def test_keyword_inputs_and_leaf_root() -> None:
    model = models.TwoInputs()
    arch = trace(model, (torch.randn(2, 4),), {"y": torch.randn(2, 3)})
    assert [node["id"] for node in arch["nodes"] if node["kind"] == "input"] == ["input:0", "input:1"]
    assert _node(arch, "input:1")["out_shapes"] == [[2, 3]]
    assert _sources(arch, "module:fc_y:0") == ["input:1"]
    assert _sources(arch, "function:add:0") == ["module:fc_x:0", "module:fc_y:0"]
    leaf = trace(nn.Linear(4, 2), (torch.randn(3, 4),))
    assert _ids(leaf) == ["input:0", "module::0", "output:0"] and leaf["groups"] == []


def test_resnet50_shared_inplace_relu_and_residual_add() -> None:
    model = models.ResNet50().eval()
    arch = trace(model, (torch.randn(1, 3, 64, 64),))
    assert [_node(arch, f"module:layer1.0.relu:{k}")["call"] for k in range(3)] == [0, 1, 2]
    add = _node(arch, "function:add:0")
    assert add["parent"] == "layer1.0" and add["kwargs"] == {"inplace": True}
    assert _sources(arch, "function:add:0") == ["module:layer1.0.bn3:0", "module:layer1.0.downsample.1:0"]
    assert _sources(arch, "module:layer1.0.relu:2") == ["function:add:0"]
    assert _sources(arch, "function:add:1") == ["module:layer1.1.bn3:0", "module:layer1.0.relu:2"]
    assert sum(node["kind"] == "function" and node["op"] == "add" for node in arch["nodes"]) == 16
    assert {"module": "layer1.0.downsample", "type": "Sequential", "parent": "layer1.0"} in arch["groups"]


# ----------------------------------------------------------------------------- autograd


@pytest.mark.parametrize(
    "model_cls",
    [
        models.ResidualNet,
        models.TinyUNet,
        models.LSTMClassifier,
        models.TinyTransformer,
        models.TupleOutput,
        models.InplaceOps,
    ],
    ids=lambda cls: cls.__name__,
)
def test_every_reachable_autograd_node_is_attributed(model_cls: type[nn.Module]) -> None:
    model, arch = _traced(model_cls)
    torch.manual_seed(0)
    outputs = model(model_cls.example_input())
    expected = _reachable_grad_fns(list(outputs) if isinstance(outputs, tuple) else [outputs])
    assert Counter(e["name"] for e in arch["autograd"]["by_autograd"]) == expected
    ids = set(_ids(arch))
    assert all(entry["node"] in ids for entry in arch["autograd"]["by_autograd"])
    # every module/function node that feeds the outputs owns its own output grad_fn in the reverse map
    assert {(name, node) for node, name in arch["autograd"]["by_node"].items()} <= _attributed(arch)


def test_autograd_names_of_conv_linear_and_accumulate_grad() -> None:
    model, arch = _traced(models.ResidualNet)
    by_node = arch["autograd"]["by_node"]
    assert by_node["module:stem:0"] == "ConvolutionBackward0"
    assert by_node["module:fc:0"] == "AddmmBackward0"
    assert by_node["function:flatten:0"] == "ViewBackward0"
    pairs = _attributed(arch)
    assert ("TBackward0", "module:fc:0") in pairs  # created inside Linear, not on its output
    accumulate = Counter(e["node"] for e in arch["autograd"]["by_autograd"] if e["name"] == "AccumulateGrad")
    assert accumulate == {
        "module:stem:0": 2,
        "module:block.conv1:0": 1,
        "module:block.bn1:0": 2,
        "module:block.conv2:0": 1,
        "module:block.bn2:0": 2,
        "module:fc:0": 2,
    }
    assert sum(accumulate.values()) == len(list(model.parameters()))


def test_input_history_is_not_walked_and_input_leaf_is_attributed() -> None:
    model = models.ReusedModule()
    leaf = torch.randn(2, 4, requires_grad=True)
    arch = trace(model, (leaf,))
    assert ("AccumulateGrad", "input:0") in _attributed(arch)
    arch = trace(model, (leaf * 2,))
    names = Counter(e["name"] for e in arch["autograd"]["by_autograd"])
    assert names["MulBackward0"] == 0 and names["AccumulateGrad"] == 2


def test_a_leaf_that_writes_its_input_in_place_owns_that_write() -> None:
    # The recording mode is off inside leaf calls (their ops are no nodes): the autograd node of an
    # in-place write to the call's input is still the call's, not the input's producer's.
    class DoublesItsInput(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x.mul_(2)
            return x.sum(1, keepdim=True)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.m, self.b = nn.Linear(4, 4), DoublesItsInput(), nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.a(x)
            return self.b(h) + self.m(h)

    pairs = _attributed(trace(Net(), (torch.randn(3, 4),)))
    assert ("MulBackward0", "module:m:0") in pairs and ("SumBackward1", "module:m:0") in pairs
    assert ("AddmmBackward0", "module:a:0") in pairs


def test_a_leaf_that_raises_leaves_no_recording_mode_behind() -> None:
    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("leaf failed")

    modes = torch._C._len_torch_function_stack()
    with pytest.raises(RuntimeError, match="leaf failed"):
        trace(nn.Sequential(nn.Linear(3, 3), Fails()), (torch.randn(2, 3),))
    assert torch._C._len_torch_function_stack() == modes
    arch = trace(nn.Sequential(nn.Linear(3, 3), nn.ReLU()), (torch.randn(2, 3),))  # the next trace is whole
    assert [n["id"] for n in arch["nodes"] if n["kind"] == "module"] == ["module:0:0", "module:1:0"]


# ----------------------------------------------------------------------------- no side effects


def _state(model: nn.Module) -> dict:
    """Deep copy of everything trace must not change."""
    return {
        "tensors": {name: t.detach().clone() for name, t in [*model.named_parameters(), *model.named_buffers()]},
        "objects": {name: t for name, t in [*model.named_parameters(), *model.named_buffers()]},
        "training": {name: m.training for name, m in model.named_modules()},
        "grads": {name: None if p.grad is None else (p.grad, p.grad.clone()) for name, p in model.named_parameters()},
        "hooks": {name: (dict(m._forward_hooks), dict(m._forward_pre_hooks)) for name, m in model.named_modules()},
    }


def _assert_same_state(model: nn.Module, before: dict) -> None:
    """Bit-identical tensors, same objects, modes, grads and hooks as ``before``."""
    after = _state(model)
    assert after["tensors"].keys() == before["tensors"].keys()
    for name, tensor in before["tensors"].items():
        assert after["tensors"][name].dtype == tensor.dtype and torch.equal(after["tensors"][name], tensor), name
        assert after["objects"][name] is before["objects"][name], name
    assert after["training"] == before["training"]
    assert after["hooks"] == before["hooks"]
    for name, grad in before["grads"].items():
        current = dict(model.named_parameters())[name].grad
        if grad is None:
            assert current is None, name
        else:
            assert current is grad[0] and torch.equal(current, grad[1]), name


def test_trace_changes_nothing_in_train_mode() -> None:
    torch.manual_seed(0)
    model = models.ConvBnRelu().train()  # BN updates its running stats, Dropout draws random numbers
    model.fc.eval()  # mixed modes must survive
    model.fc.weight.grad = torch.randn_like(model.fc.weight)
    before = _state(model)
    x = models.ConvBnRelu.example_input()
    rng = torch.get_rng_state()
    arch = trace(model, (x,))
    assert torch.equal(torch.get_rng_state(), rng)
    _assert_same_state(model, before)
    assert model.features[1].num_batches_tracked.item() == 0
    assert arch["autograd"]["by_node"]["module:dropout:0"] == "MulBackward0"  # dropout ran in train mode


def test_trace_changes_nothing_in_eval_mode_and_random_stream_continues() -> None:
    model = models.ConvBnRelu().eval()
    for param in model.parameters():
        param.grad = torch.ones_like(param)
    before = _state(model)
    torch.manual_seed(7)
    trace(model, (models.ConvBnRelu.example_input(),))
    after_trace = torch.rand(4)
    torch.manual_seed(7)
    models.ConvBnRelu.example_input()
    assert torch.equal(after_trace, torch.rand(4))
    _assert_same_state(model, before)


def test_failing_forward_removes_hooks_and_restores_state() -> None:
    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm1d(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.bn(x)
            raise RuntimeError("boom")

    model = Broken().train()
    before = _state(model)
    with pytest.raises(RuntimeError, match="boom"):
        trace(model, (torch.randn(3, 4),))
    _assert_same_state(model, before)
    assert torch.equal(model.bn.running_mean, torch.zeros(4))


def test_reassigned_buffer_is_put_back() -> None:
    class Reassigns(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.count = self.count + 1
            return self.fc(x)

    model = Reassigns()
    before = _state(model)
    trace(model, (torch.randn(1, 2),))
    _assert_same_state(model, before)


# ----------------------------------------------------------------------------- summary table


def test_summary_table_lists_nodes_in_order_with_totals() -> None:
    model, arch = _traced(models.LeNetDigits)
    table = summary_table(arch)
    lines = table.splitlines()
    assert lines[0].split() == ["Layer", "Type", "/", "op", "Output", "shape", "Params"]
    rows = [line.split()[0] for line in lines[2:-4]]
    assert rows == ["input:0", *LENET_CALLS, "output:0"]
    assert f"Total params (called modules): {sum(p.numel() for p in model.parameters()):,}" in lines
    assert "Nodes: 14 (1 input, 12 module calls, 0 functions, 1 output)" in lines


def test_summary_table_counts_a_tied_weight_once() -> None:
    model = models.TiedLanguageModel()
    arch = trace(model, (torch.randint(0, 20, (2, 5)),))
    lines = summary_table(arch).splitlines()
    assert f"Total params (called modules): {sum(p.numel() for p in model.parameters()):,}" in lines  # 232, not 392
    out = next(node for node in arch["nodes"] if node.get("module") == "head")
    assert out["params"] == 160 and out["params_shared"] == 160
    assert "params_shared" not in next(node for node in arch["nodes"] if node.get("module") == "emb")
    assert any(line.startswith("head ") and "160 (160 tied)" in line for line in lines)


def test_summary_table_indents_groups_and_shows_ops() -> None:
    _, arch = _traced(models.FunctionalNet)
    lines = summary_table(arch).splitlines()
    assert any(line.startswith("block ") and "FunctionalBlock" in line for line in lines)
    assert any(line.startswith("  block.fc ") and "[2, 8]" in line for line in lines)
    leaky = "leaky_relu(negative_slope=0.2, inplace=False)"
    assert any(line.startswith("  leaky_relu:0 ") and leaky in line for line in lines)
    reused = summary_table(_traced(models.ReusedModule)[1])
    assert "fc (call 1)" in reused and "(reused)" in reused


def test_ops_in_other_hooks_do_not_become_nodes() -> None:
    model = models.LeNetDigits()
    seen = []
    handles = [
        model.conv1.register_forward_pre_hook(lambda module, args: seen.append(args[0].abs().mean())),
        model.conv1.register_forward_hook(lambda module, args, output: seen.append(output.std())),
    ]
    try:
        arch = trace(model, (models.LeNetDigits.example_input(),))
    finally:
        for handle in handles:
            handle.remove()
    assert len(seen) == 2
    assert not any(node["kind"] == "function" for node in arch["nodes"])
    assert _sources(arch, "module:conv1:0") == ["input:0"]


class _Square(torch.autograd.Function):
    """x * x with a hand-written backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def test_custom_autograd_function_is_attributed_to_its_ops() -> None:
    class UsesFunction(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _Square.apply(self.fc(x)).sum(dim=1)

    arch = trace(UsesFunction(), (torch.randn(2, 3),))
    assert _ids(arch) == ["input:0", "module:fc:0", "function:mul:0", "function:sum:0", "output:0"]
    assert ("_SquareBackward", "function:mul:0") in _attributed(arch)


def test_a_leaf_holding_one_parameter_under_two_names_counts_it_once_and_inplace_may_be_a_class_attribute() -> None:
    class Tied(nn.Module):
        inplace = True  # on the class, not set in __init__

        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(3, 3))
            self.alias = self.weight  # the same Parameter registered twice

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.weight

    model = nn.Sequential(Tied(), nn.ReLU())
    node = _node(trace(model, (torch.randn(2, 3),)), "module:0:0")
    assert node["params"] == 9 == sum(p.numel() for p in model[0].parameters())
    assert node["inplace"] is True
    assert "inplace" not in _node(trace(nn.Sequential(nn.Linear(3, 3)), (torch.randn(2, 3),)), "module:0:0")
