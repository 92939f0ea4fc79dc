"""The architecture view on a 12-block transformer (about 2,000 traced nodes, tests/transformer.py) in
headless Chromium against a real TensorBoard: it opens with the blocks collapsed, one block expands
to its own layers, and "expand all" draws every module call. The run is recorded by the real
recorder (3 captures); one logdir and one TensorBoard serve the module.
"""

from __future__ import annotations

import sys

import pytest
from playwright.sync_api import expect

from tests.tensorboard_server import get_json, tensorboard
from tests.transformer import BLOCKS, HEADS, record_gpt

pytestmark = [pytest.mark.browser, pytest.mark.slow]

IFRAME = 'iframe[src*="plugin_entry.html?name=xray"]'
RUN = "gpt"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(logdir, the architecture the recorder traced)."""
    logdir = tmp_path_factory.mktemp("big_graph_logdir")
    return logdir, record_gpt(logdir / RUN)


@pytest.fixture(scope="module")
def url(recorded, tmp_path_factory):
    with tensorboard(sys.executable, recorded[0], cwd=tmp_path_factory.mktemp("tb")) as base:
        yield base


def attribute_values(locator, name):
    return sorted(locator.evaluate_all(f"(ns) => ns.map((n) => n.getAttribute('{name}'))"))


def test_transformer_opens_collapsed_expands_a_block_and_everything(url, recorded, page):
    arch = get_json(f"{url}/data/plugin/xray/architecture?run={RUN}")
    assert [n["id"] for n in arch["nodes"]] == [n["id"] for n in recorded[1]["nodes"]]
    assert len(arch["nodes"]) > 1800
    module_calls = [n for n in arch["nodes"] if n["kind"] == "module"]
    blocks = [f"blocks.{i}" for i in range(BLOCKS)]

    page.goto(f"{url}/#xray&p.xray.run={RUN}")
    frame = page.frame_locator(IFRAME)
    graph = frame.locator('[data-view="graph"]')
    expect(frame.locator('[data-view="graph"][data-state="ready"]')).to_be_visible(timeout=30_000)

    # The default view: the 12 blocks as collapsed groups inside the open "blocks", nothing of them drawn.
    expect(graph.locator('[data-group][data-expanded="false"]')).to_have_count(BLOCKS)
    assert attribute_values(graph.locator('[data-group][data-expanded="false"]'), "data-group") == sorted(blocks)
    assert attribute_values(graph.locator('[data-group][data-expanded="true"]'), "data-group") == ["blocks"]
    top_level = [n["module"] for n in module_calls if n["parent"] == ""]
    assert attribute_values(graph.locator("[data-layer]"), "data-layer") == sorted(top_level)
    expect(graph.locator('[data-layer^="blocks."]')).to_have_count(0)

    # Expanding one block shows its layers; its attention and MLP are groups of their own, still closed.
    graph.locator('[data-group="blocks.3"] [data-action="toggle"]').click()
    expect(graph.locator('[data-group="blocks.3"]')).to_have_attribute("data-expanded", "true")
    expect(graph.locator('[data-layer^="blocks.3."]')).to_have_count(2)
    in_block = [n["module"] for n in module_calls if n["parent"] == "blocks.3"]
    shown = attribute_values(graph.locator('[data-layer^="blocks.3."]'), "data-layer")
    assert shown == sorted(in_block) == ["blocks.3.ln1", "blocks.3.ln2"]
    for group in ("blocks.3.sa", "blocks.3.ffwd"):
        expect(graph.locator(f'[data-group="{group}"]')).to_have_attribute("data-expanded", "false")
    expect(graph.locator('[data-group][data-expanded="false"]')).to_have_count(BLOCKS - 1 + 2)

    # Expand all: one [data-layer] node per module call, every node of the architecture drawn.
    graph.locator('[data-action="expand-all"]').click()
    expect(graph.locator("[data-layer]")).to_have_count(len(module_calls))
    ids = graph.locator("[data-node-id]").evaluate_all("(ns) => ns.map((n) => n.dataset.nodeId)")
    assert sorted(ids) == sorted(n["id"] for n in arch["nodes"])
    expect(graph.locator('[data-group][data-expanded="false"]')).to_have_count(0)
    expect(graph.locator(f'[data-layer="blocks.{BLOCKS - 1}.sa.heads.{HEADS - 1}.value"]')).to_have_count(1)
    assert page.xray_errors == []
