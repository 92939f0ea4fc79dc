"""The tab's graph hierarchy (frontend/graph_model.js, graph_groups.js) and its layout without dagre
(graph_place.js), run in node on architectures the real tracer records: containers that are never
called (an nn.ModuleList looped over in forward) become groups by name, long lists are shown in
ranges of 100, so that no level holds more than about a hundred boxes, and a container on which the
layout function throws is laid out as a plain grid instead of failing the whole graph."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

from xray_tb.trace.tracer import trace

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the frontend's modules")

FRONTEND = Path(__file__).resolve().parents[2] / "frontend"
DASH = "\u2013"

HIERARCHY = """
import fs from 'fs';
import {{ buildHierarchy, defaultExpanded, countVisible, edgesByContainer, allGroups }} from {model};
import {{ gridShape, layoutGraph, withGridFallback }} from {place};
const arch = JSON.parse(fs.readFileSync({arch}, 'utf8'));
const h = buildHierarchy(arch);
const expanded = defaultExpanded(h);
const graph = {{ h, edges: edgesByContainer(h, arch.edges || []), cache: new Map(), shapes: new Map() }};
// A layout function that fails on any container of more than 3 children, as dagre did on long chains.
const failing = withGridFallback((sizes, edges) => {{
  if (sizes.length > 3) throw new RangeError('Maximum call stack size exceeded');
  return gridShape(sizes, edges);
}});
const all = layoutGraph(graph, allGroups(h), failing);
console.log(JSON.stringify({{
  groups: Object.fromEntries([...h.groups].map(([name, g]) => [name, {{ kind: g.kind, parent: g.parent, children: g.children, depth: g.depth }}])),
  children: Object.fromEntries(h.children),
  parentOf: Object.fromEntries(h.parentOf),
  expanded: [...expanded],
  visible: countVisible(h, expanded),
  allBoxes: Object.keys(all.boxes),
  fallbacks: all.fallbacks,
  overlaps: (() => {{
    // Siblings of one container never overlap in the grid.
    let n = 0;
    for (const [container, keys] of h.children) {{
      const boxes = keys.map((k) => all.boxes[k]);
      for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {{
        const a = boxes[i], b = boxes[j];
        if (a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height) n++;
      }}
    }}
    return n;
  }})(),
}}));
"""


def hierarchy(arch: dict, tmp_path: Path) -> dict:
    path = tmp_path / "arch.json"
    path.write_text(json.dumps(arch))
    script = HIERARCHY.format(
        model=json.dumps((FRONTEND / "graph_model.js").as_uri()),
        place=json.dumps((FRONTEND / "graph_place.js").as_uri()),
        arch=json.dumps(str(path)),
    )
    result = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


class Loop(nn.Module):
    """``layers``, a ModuleList never called, looped over with an op of the body between the layers."""

    def __init__(self, n: int, body: str = "none"):
        super().__init__()
        self.body = body
        self.stem = nn.Linear(8, 8)
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(n))
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        x = self.stem(x)
        for layer in self.layers:
            x = torch.relu(layer(x)) if self.body == "relu" else x + layer(x) if self.body == "residual" else layer(x)
        return self.head(x.mean(0, keepdim=True))


class Wrapped(nn.Module):
    """A called container holding a ModuleDict of called blocks, and a called 250-long Sequential."""

    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.flat = nn.Sequential(*[nn.Linear(8, 8) for _ in range(250)])

    def forward(self, x):
        return self.flat(self.encoder(x))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleDict({name: nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for name in ("a", "b", "c")})

    def forward(self, x):
        for block in self.blocks.values():
            x = block(x)
        return x


def traced(model: nn.Module) -> dict:
    torch.manual_seed(0)
    return trace(model, (torch.randn(2, 8),))


def test_an_uncalled_module_list_is_a_group_in_ranges_of_100(tmp_path):
    arch = traced(Loop(1500))
    assert arch["groups"] == []  # the tracer has no group for the list
    h = hierarchy(arch, tmp_path)
    assert h["children"][""] == ["input:0", "module:stem:0", "group:layers", "function:mean:0", "module:head:0", "output:0"]
    ranges = [f"group:layers.{i}{DASH}{i + 99}" for i in range(0, 1500, 100)]
    assert h["children"]["group:layers"] == ranges
    assert h["groups"]["layers"]["kind"] == "name" and h["groups"][f"layers.0{DASH}99"]["kind"] == "range"
    assert h["children"][ranges[3]] == [f"module:layers.{i}:0" for i in range(300, 400)]
    assert h["parentOf"]["module:layers.1499:0"] == ranges[-1]
    assert max(len(keys) for keys in h["children"].values()) <= 100
    # Opened readable: the list open, its ranges closed.
    assert h["expanded"] == ["group:layers"] and h["visible"] <= 60
    # Every node is drawn once everything is expanded, even with a layout function that throws.
    assert {k for k in h["allBoxes"] if not k.startswith("group:")} == {n["id"] for n in arch["nodes"]}
    assert "" in h["fallbacks"] and f"group:layers.0{DASH}99" in h["fallbacks"]
    assert h["overlaps"] == 0


@pytest.mark.parametrize("body, op", [("relu", "relu"), ("residual", "add")])
def test_the_ops_of_the_loop_body_go_into_the_list_group(tmp_path, body, op):
    arch = traced(Loop(300, body))
    h = hierarchy(arch, tmp_path)
    ops = [n["id"] for n in arch["nodes"] if n.get("op") == op]
    assert len(ops) == 300
    inside = [k for k in ops if h["parentOf"][k].startswith("group:layers")]
    assert len(inside) == 299  # the last iteration's op comes after the last layer: it stays outside
    assert h["parentOf"][ops[-1]] == ""
    assert [k for k in h["children"][""] if k.startswith("group:")] == ["group:layers"]
    # Ranges are named after their layers, not after the ops between them.
    assert h["children"]["group:layers"] == [f"group:layers.{i}{DASH}{i + 49}" for i in range(0, 300, 50)]


def test_name_groups_sit_inside_called_containers_and_long_called_containers_are_ranged(tmp_path):
    arch = traced(Wrapped())
    h = hierarchy(arch, tmp_path)
    assert h["groups"]["encoder.blocks"] == {
        "kind": "name",
        "parent": "encoder",
        "children": ["group:encoder.blocks.a", "group:encoder.blocks.b", "group:encoder.blocks.c"],
        "depth": 1,
    }
    assert h["parentOf"]["group:encoder.blocks.a"] == "group:encoder.blocks"
    assert h["parentOf"]["module:encoder.blocks.a.0:0"] == "group:encoder.blocks.a"  # traced parent kept
    assert h["children"]["group:flat"] == [f"group:flat.0{DASH}99", f"group:flat.100{DASH}199", f"group:flat.200{DASH}249"]
    assert h["groups"]["flat"]["kind"] == "module"


def test_models_without_uncalled_containers_keep_their_groups(tmp_path):
    from tests.transformer import GPT

    torch.manual_seed(0)
    model = GPT(blocks=2, heads=4)
    arch = trace(model, (torch.randint(0, 65, (2, 16)),))
    h = hierarchy(arch, tmp_path)
    traced_groups = {g["module"] for g in arch["groups"]}
    added = {name for name, g in h["groups"].items() if g["kind"] != "module"}
    # Only the heads' ModuleList of each block's attention is new, between the attention and its heads.
    assert added == {"blocks.0.sa.heads", "blocks.1.sa.heads"}
    assert {name for name, g in h["groups"].items() if g["kind"] == "module"} == traced_groups
    assert h["parentOf"]["group:blocks.0.sa.heads.3"] == "group:blocks.0.sa.heads"
    assert h["parentOf"]["group:blocks.0.sa.heads"] == "group:blocks.0.sa"
    assert h["visible"] <= 60
