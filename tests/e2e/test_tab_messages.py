"""What the tab says about links naming what a run lacks, and where it says it, in headless Chromium
against a real TensorBoard: a kind the layer does not record, a layer the run lacks (the banner with
close matches, visible above the sticky bars however the view is scrolled), an unknown health
statistic (no made-up legend), and ``.xray-node[data-layer]`` as the hook of graph nodes (other
elements carry ``data-layer`` too). Also the findings list's order (root causes first)."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tb_plugin.close_matches import close_matches
from tests.e2e.health_runs import HEALTH_DEAD
from tests.e2e.runs import RUN, SMALL
from tests.e2e.tab_page import open_tab, plugin_frame
from tests.tensorboard_server import get_json

pytestmark = [pytest.mark.browser, pytest.mark.slow]

README = Path(__file__).resolve().parents[2] / "frontend" / "README.md"


def api(url, route, **query):
    return get_json(f"{url}/data/plugin/xray/{route}?{urllib.parse.urlencode(query)}")


def settled(frame):
    expect(frame.locator('.xray-panel[data-state="ready"]').first).to_be_attached(timeout=30_000)
    expect(frame.locator('.xray-panel[data-state="loading"]')).to_have_count(0, timeout=30_000)


def test_a_link_naming_a_kind_the_layer_does_not_record_says_so_and_shows_the_recorded_kinds(tensorboard_url, page):
    info = next(l for l in api(tensorboard_url, "layers", run=SMALL)["layers"] if l["name"] == "conv1")
    recorded = [k for k in ("weight", "weight_grad", "bias", "bias_grad", "output", "activation", "grad") if info["kinds"].get(k)]
    assert "activation" not in recorded and recorded
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={SMALL}&p.xray.view=layer&p.xray.layer=conv1&p.xray.kind=activation")
    expect(frame.locator("#xray-layer-title")).to_have_text("conv1")
    hint = frame.locator("[data-view=layer] .xray-hint")
    expect(hint).to_be_visible()
    expect(hint).to_have_text(f"Kind 'activation' is not recorded for layer 'conv1'; recorded: {', '.join(recorded)}.")
    settled(frame)
    shown = frame.locator(".xray-panel[data-kind]").evaluate_all("ps => ps.map((p) => p.dataset.kind)")
    assert shown == recorded
    kind = frame.locator('select[data-action="kind"]')
    expect(kind).to_have_value("activation")
    assert kind.locator('option[value="activation"]').evaluate("(o) => o.disabled")
    # Picking a kind the layer records goes back to the usual filter, without the notice.
    kind.select_option(recorded[0])
    expect(hint).to_be_hidden()
    expect(frame.locator(".xray-panel[data-kind]")).to_have_count(1)
    # A link pasted into the open tab that names no kind shows every kind, as a fresh load of it would.
    page.evaluate(f"() => {{ location.hash = '#xray&p.xray.run={SMALL}&p.xray.view=layer&p.xray.layer=conv1'; }}")
    expect(frame.locator(".xray-panel[data-kind]")).to_have_count(len(recorded))
    assert [e for e in page.xray_errors if e.startswith("uncaught")] == []


def banner_state(page) -> dict:
    return plugin_frame(page).evaluate(
        """() => {
        const banner = document.querySelector('#xray-error');
        const b = banner.getBoundingClientRect();
        const hit = document.elementFromPoint(b.left + b.width / 2, (b.top + b.bottom) / 2);
        const t = document.querySelector('.xray-timeline').getBoundingClientRect();
        const h = document.querySelector('[data-view=layer] .xray-header').getBoundingClientRect();
        return {hit: Boolean(hit && banner.contains(hit)), top: b.top, bottom: b.bottom, timelineTop: t.top,
                timelineBottom: t.bottom, headerTop: h.top, scrolled: document.querySelector('.xray-main').scrollTop};
    }"""
    )


def test_a_link_naming_a_missing_layer_says_so_with_close_matches_above_the_scrolled_view(tensorboard_url, page):
    layers = [l["name"] for l in api(tensorboard_url, "layers", run=RUN)["layers"]]
    modules = [n["module"] for n in api(tensorboard_url, "architecture", run=RUN)["nodes"] if n["kind"] == "module"]
    close = close_matches("fc7", list(dict.fromkeys(layers + modules)), n=3)
    assert close and "fc1" in close
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={RUN}&p.xray.view=layer&p.xray.layer=fc1")
    settled(frame)
    expect(frame.locator(".xray-health-chart").first).to_be_attached(timeout=30_000)
    plugin_frame(page).evaluate("() => { const m = document.querySelector('.xray-main'); m.scrollTop = m.scrollHeight; }")
    assert banner_state(page)["scrolled"] > 300
    # A link pasted into the open, scrolled tab.
    page.evaluate(f"() => {{ location.hash = '#xray&p.xray.run={RUN}&p.xray.view=layer&p.xray.layer=fc7'; }}")
    banner = frame.locator("#xray-error")
    quoted = [f"'{c}'" for c in close]
    mean = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    expect(banner).to_contain_text(f"The link's layer 'fc7' is not in run '{RUN}' (did you mean {mean}?); showing '{layers[0]}'.")
    expect(frame.locator("#xray-layer-title")).to_have_text(layers[0])
    for where in ("as pasted", "scrolled to the bottom", "scrolled to the top"):
        if where != "as pasted":
            plugin_frame(page).evaluate(f"() => {{ const m = document.querySelector('.xray-main'); m.scrollTop = {'m.scrollHeight' if 'bottom' in where else 0}; }}")
        state = banner_state(page)
        assert state["hit"], (where, state)  # the banner is what shows at its centre: nothing covers it
        assert state["top"] >= 0 and state["timelineTop"] >= state["bottom"] - 0.5, (where, state)  # the timeline is under it
        if where != "scrolled to the top":
            assert abs(state["headerTop"] - state["timelineBottom"]) < 1, (where, state)  # stuck bars, no gap
    # Each close match is a button that opens it.
    frame.locator("#xray-error .xray-error-action", has_text=f"Open '{close[0]}'").click()
    expect(frame.locator("#xray-layer-title")).to_have_text(close[0])
    expect(banner).to_be_hidden()
    assert [e for e in page.xray_errors if e.startswith("uncaught")] == []


def test_a_link_naming_an_unknown_statistic_draws_no_legend(tensorboard_url, page):
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={HEALTH_DEAD}&p.xray.view=health&p.xray.stat=grad_l3")
    matrix = frame.locator(f'.xray-health-matrix[data-run="{HEALTH_DEAD}"]')
    expect(matrix).to_have_attribute("data-state", "error", timeout=30_000)
    expect(matrix).to_contain_text("grad_l3")
    expect(matrix).to_contain_text("did you mean 'grad_l1', 'grad_l2', 'grad_var'?")  # the route's close matches
    view = frame.locator("[data-view=health]")
    expect(view.locator(".xray-matrix-legend")).to_be_hidden()
    expect(view.locator(".xray-health-bar:visible")).to_have_count(0)
    # A statistic the run records has its legend.
    frame.locator('select[data-action="health-stat"]').select_option("grad_l2")
    expect(matrix).to_have_attribute("data-state", "ready", timeout=30_000)
    expect(view.locator(".xray-matrix-legend")).to_be_visible()
    expect(view.locator(".xray-matrix-legend")).to_contain_text("log scale")


def test_graph_nodes_are_the_xray_node_elements_with_data_layer(tensorboard_url, page):
    assert "`.xray-node[data-layer]` | module nodes of the graph" in README.read_text(encoding="utf-8")
    findings = api(tensorboard_url, "findings", run=HEALTH_DEAD)["findings"]
    assert findings, "health_dead has a dead_units finding"
    modules = [n["module"] for n in api(tensorboard_url, "architecture", run=HEALTH_DEAD)["nodes"] if n["kind"] == "module" and n["module"]]
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={HEALTH_DEAD}")
    graph = frame.locator('[data-view="graph"]')
    expect(graph).to_have_attribute("data-state", "ready", timeout=45_000)
    expect(graph.locator(".xray-finding-badge").first).to_be_attached(timeout=20_000)
    nodes = graph.locator(".xray-node[data-layer]").evaluate_all("ns => ns.map((n) => n.dataset.layer)")
    assert sorted(nodes) == sorted(modules)  # one per call: this model calls each module once
    # Whatever else carries data-layer in the graph is a finding badge inside a node, not a node.
    others = graph.locator("[data-layer]:not(.xray-node)").evaluate_all(
        "ns => ns.map((n) => [n.classList.contains('xray-finding-badge'), Boolean(n.parentElement.closest('.xray-node, .xray-group'))])")
    assert others and all(badge and inside for badge, inside in others)
    # The sidebar's layer buttons carry it too, outside the graph.
    buttons = frame.locator("button.xray-layer[data-layer]")
    expect(buttons.first).to_be_attached()
    assert graph.locator("button.xray-layer").count() == 0


def test_the_findings_list_puts_root_causes_first(tensorboard_url, page):
    open_tab(page, tensorboard_url, f"&p.xray.run={RUN}")
    order = plugin_frame(page).evaluate(
        """async () => {
        const { sortFindings } = await import(`${location.origin}/data/plugin/xray/static/findings_list.js`);
        const f = (run, rule, layer, step) => ({ run, rule, layer, step });
        const sorted = sortFindings([
            f('b', 'zero_gradient', '0', 8), f('b', 'vanishing_gradient', '3', 57), f('a', 'dead_units', '7', 140),
            f('b', 'dead_units', '3', 160), f('b', 'dead_units', '7', 140), f('a', 'saturation', '0', 2),
            f('b', 'exploding_gradient', '0', 90), f('b', 'nonfinite', '3', 300),
        ], ['a', 'b']);
        return sorted.map((x) => `${x.run}:${x.rule}:${x.layer}`);
    }"""
    )
    assert order == [
        "b:nonfinite:3", "b:exploding_gradient:0",
        "a:dead_units:7", "b:dead_units:7", "b:dead_units:3",
        "a:saturation:0", "b:zero_gradient:0", "b:vanishing_gradient:3",
    ]
