"""The architecture view on a model whose 1,500 layers sit in an ``nn.ModuleList`` that is never called
itself (``for layer in self.layers: x = layer(x)``), in headless Chromium against a real TensorBoard.
The tracer records no group for such a list, so all 1,500 calls were siblings at the top level, and
dagre ran out of stack on them ("graph layout failed", an empty graph). The tab groups them by name
("layers") and in ranges of 100 ("layers.0–99", …), so the graph opens readable and expands; and when
the layout worker itself fails, the view still draws the graph, as a plain grid, with a notice.
"""

from __future__ import annotations

import sys
import time

import pytest
from playwright.sync_api import expect

from tests.tensorboard_server import get_json, tensorboard

pytestmark = [pytest.mark.browser, pytest.mark.slow]

IFRAME = 'iframe[src*="plugin_entry.html?name=xray"]'
RUN = "list1500"
LAYERS = 1500
DRAWN_WITHIN_MS = 15_000  # from the page's load to the drawn graph; about 1 s on a 2-core machine
DASH = "\u2013"


def record_list(run_dir, layers: int = LAYERS) -> dict:
    """Records a ModuleList chain of ``layers`` Linear(8, 8) layers at two steps; returns the architecture."""
    import torch
    from torch import nn

    from xray_tb import Xray

    class Deep(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(layers))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Deep()
    x = torch.randn(2, 8)
    with Xray(model, x, logdir=str(run_dir), plan=["layers.0", f"layers.{layers - 1}"]) as xray:
        for step in range(2):
            model(x).sum().backward()
            xray.take_graphs(step)
            model.zero_grad()
        return xray.architecture


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("big_list_logdir")
    return logdir, record_list(logdir / RUN)


@pytest.fixture(scope="module")
def url(recorded, tmp_path_factory):
    with tensorboard(sys.executable, recorded[0], cwd=tmp_path_factory.mktemp("tb")) as base:
        yield base


def boxes(graph):
    """Names of the drawn boxes: node ids and group names."""
    return graph.locator("[data-node-id], [data-group]").evaluate_all(
        "(ns) => ns.map((n) => n.dataset.nodeId || 'group:' + n.dataset.group)"
    )


def open_graph(page, url):
    started = time.monotonic()
    page.goto(f"{url}/#xray&p.xray.run={RUN}")
    frame = page.frame_locator(IFRAME)
    graph = frame.locator('[data-view="graph"]')
    expect(frame.locator('[data-view="graph"][data-state="ready"]')).to_be_visible(timeout=30_000)
    return frame, graph, (time.monotonic() - started) * 1000


def test_module_list_of_1500_layers_opens_in_ranges_and_expands(url, recorded, page):
    arch = get_json(f"{url}/data/plugin/xray/architecture?run={RUN}")
    assert sum(n["kind"] == "module" for n in arch["nodes"]) == LAYERS
    assert arch["groups"] == []  # the list is never called: the tracer has no group for it

    frame, graph, drawn_ms = open_graph(page, url)
    assert drawn_ms < DRAWN_WITHIN_MS
    expect(frame.locator(".xray-error-lines")).to_have_text("")
    expect(graph.locator("[data-graph-notice]")).to_be_hidden()
    assert graph.get_attribute("data-layout-fallback") is None

    # Opened readable: "layers" open, its 15 ranges of 100 closed; no layer drawn one by one.
    shown = boxes(graph)
    assert len(shown) <= 60
    ranges = [f"layers.{i}{DASH}{i + 99}" for i in range(0, LAYERS, 100)]
    expect(graph.locator('[data-group="layers"]')).to_have_attribute("data-expanded", "true")
    expect(graph.locator('[data-group][data-expanded="false"]')).to_have_count(len(ranges))
    assert graph.locator('[data-group][data-expanded="false"]').evaluate_all("(ns) => ns.map((n) => n.dataset.group)") == ranges
    expect(graph.locator(".xray-node[data-layer]")).to_have_count(0)
    first_range = graph.locator(f'[data-group="{ranges[0]}"]')
    expect(first_range).to_contain_text("100 items")
    expect(first_range).to_contain_text("1 recorded")

    # A range expands to its 100 layers, the recorded one marked; edges run along the chain.
    first_range.locator('[data-action="toggle"]').click()
    expect(first_range).to_have_attribute("data-expanded", "true")
    expect(graph).to_have_attribute("data-state", "ready")
    expect(graph.locator(".xray-node[data-layer]")).to_have_count(100)
    expect(graph.locator('.xray-node[data-layer="layers.0"].xray-recorded')).to_have_count(1)
    expect(graph.locator('path.xray-edge[data-src="module:layers.41:0"][data-dst="module:layers.42:0"]')).to_have_count(1)

    # Collapsing "layers" leaves one box for the whole list; expanding it shows the ranges again.
    layers = graph.locator('[data-group="layers"]')
    layers.locator('[data-action="toggle"]').first.click()
    expect(layers).to_have_attribute("data-expanded", "false")
    expect(graph.locator("[data-group]")).to_have_count(1)
    expect(layers).to_contain_text(f"{len(ranges)} items")
    layers.locator('[data-action="toggle"]').click()
    expect(graph.locator('[data-group][data-expanded="false"]')).to_have_count(len(ranges))

    # Search opens the range around a layer deep in the list.
    graph.locator('input[data-action="search"]').fill(f"layers.{LAYERS - 1}")
    graph.locator('input[data-action="search"]').press("Enter")
    expect(graph.locator(f'.xray-node[data-layer="layers.{LAYERS - 1}"]')).to_have_count(1)
    expect(graph.locator(f'[data-group="layers.1400{DASH}1499"]')).to_have_attribute("data-expanded", "true")

    # Expand all: every layer drawn, no level laid out with more than 100 boxes.
    graph.locator('[data-action="expand-all"]').click()
    expect(graph.locator(".xray-node[data-layer]")).to_have_count(LAYERS, timeout=30_000)
    expect(graph).to_have_attribute("data-state", "ready")
    expect(frame.locator(".xray-error-lines")).to_have_text("")
    assert page.xray_errors == []


def test_a_failing_layout_worker_still_draws_the_graph_with_a_notice(url, recorded, page):
    page.context.route("**/layout_worker.js", lambda route: route.fulfill(status=404, body="gone"))
    frame, graph, _ = open_graph(page, url)
    expect(graph).to_have_attribute("data-layout-fallback", "grid")
    expect(graph.locator("[data-graph-notice]")).to_be_visible()
    expect(graph.locator("[data-graph-notice]")).to_contain_text("plain grid")
    assert 3 <= len(boxes(graph)) <= 60
    expect(graph.locator('[data-group="layers"]')).to_have_attribute("data-expanded", "true")
    first_range = graph.locator(f'[data-group="layers.0{DASH}99"]')
    first_range.locator('[data-action="toggle"]').click()
    expect(first_range).to_have_attribute("data-expanded", "true")
    expect(graph.locator(".xray-node[data-layer]")).to_have_count(100)
    expect(frame.locator(".xray-error-lines")).to_have_text("")
    # The failed worker's load is the browser's to report; nothing else went wrong.
    assert [e for e in page.xray_errors if "layout_worker" not in e and "404" not in e] == []


# A dagre whose layout throws as the real one did on a 1,000-box chain (its graph is enough for the worker).
FAILING_DAGRE = """
class Graph { setGraph() {} setDefaultEdgeLabel() {} setNode() {} setEdge() {} node() {} edge() {} graph() { return {}; } }
export const graphlib = { Graph };
export function layout() { throw new RangeError('Maximum call stack size exceeded'); }
"""


def test_a_group_dagre_fails_on_is_drawn_as_a_grid_with_a_notice(url, recorded, page):
    page.context.route(
        "**/vendor/dagre.esm.js",
        lambda route: route.fulfill(status=200, body=FAILING_DAGRE, content_type="text/javascript"),
    )
    frame, graph, _ = open_graph(page, url)
    expect(graph).to_have_attribute("data-layout-fallback", "grid")
    notice = graph.locator("[data-graph-notice]")
    expect(notice).to_contain_text("dagre could not lay out the top level, layers")
    expect(notice).to_contain_text("plain grid")
    expect(graph.locator('[data-group][data-expanded="false"]')).to_have_count(15)
    graph.locator(f'[data-group="layers.100{DASH}199"] [data-action="toggle"]').click()
    expect(graph.locator(".xray-node[data-layer]")).to_have_count(100)
    expect(notice).to_contain_text(f"layers.100{DASH}199")
    expect(frame.locator(".xray-error-lines")).to_have_text("")
    assert page.xray_errors == []
