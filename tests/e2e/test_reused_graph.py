"""A module called twice in the graph view, on a real TensorBoard in Chromium: its values are its first
call's, so only that call's box is marked recorded, and a collapsed group counts the layer once."""

from __future__ import annotations

import re
import sys

import pytest
from playwright.sync_api import expect

from tests.e2e.tab_page import open_tab
from tests.tensorboard_server import tensorboard

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    import torch
    from torch import nn

    from xray_tb import Xray

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

        def forward(self, x):
            return self.block(self.block(x))

    root = tmp_path_factory.mktemp("reused_logdir")
    torch.manual_seed(0)
    model = Twice()
    x = torch.randn(2, 4)
    with Xray(model, x, logdir=str(root / "twice"), plan={"block.0": {"weight": True}}, health=False) as xray:
        model(x).sum().backward()
        xray.take_graphs(0)
    with tensorboard(sys.executable, root, cwd=tmp_path_factory.mktemp("tb_reused")) as base:
        yield base


def test_a_reused_module_is_recorded_at_its_first_call_and_counted_once(url, page):
    frame = open_tab(page, url, "&p.xray.run=twice&p.xray.view=graph")
    graph = frame.locator('[data-view="graph"]')
    graph.locator('[data-action="expand-all"]').click()
    calls = graph.locator('.xray-node[data-layer="block.0"]')
    expect(calls).to_have_count(2, timeout=30_000)
    expect(graph.locator('.xray-node[data-layer="block.0"].xray-recorded')).to_have_count(1)
    first = graph.locator('.xray-node[data-node-id="module:block.0:0"]')
    second = graph.locator('.xray-node[data-node-id="module:block.0:1"]')
    expect(first).to_have_class(re.compile("xray-recorded"))
    assert "recorded at its first call: weight" in second.locator("title").text_content()
    graph.locator('[data-group="block"] [data-action="toggle"]').click()
    expect(graph.locator('[data-group="block"]')).to_have_attribute("data-expanded", "false")
    expect(graph.locator('[data-group="block"]')).to_contain_text("1 recorded")
