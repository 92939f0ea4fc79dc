"""Training health in the architecture graph and the layer view, in headless Chromium against a real
TensorBoard: graph nodes coloured by a statistic at the timeline's step (``data-value`` equal to the
server's ``/health`` matrix), recoloured on scrubbing without a new layout; the layer view's charts
with the step marked; dead units outlined on the activation panel (the kind health_dead records) and the prune plan of the layer
(``health_dead``, recorded here by the real recorder: tests/e2e/health_runs.py)."""

from __future__ import annotations

import base64
import re
import struct
import sys
import urllib.parse

import pytest
from playwright.sync_api import expect

from tests.e2e.runs import RUN
from tests.e2e.health_runs import DEAD_UNITS, HEALTH_DEAD, record_dead
from tests.tensorboard_server import get_json, tensorboard

pytestmark = [pytest.mark.browser, pytest.mark.slow]

IFRAME = 'iframe[src*="plugin_entry.html?name=xray"]'


def open_tab(page, url, hash_suffix=""):
    page.goto(f"{url}/#xray{hash_suffix}")
    frame = page.frame_locator(IFRAME)
    expect(frame.locator("#xray-run")).to_be_attached(timeout=30_000)
    return frame


def api(url, route, **params):
    return get_json(f"{url}/data/plugin/xray/{route}?{urllib.parse.urlencode(params)}")


def health_matrix(url, run, stat):
    """{layer: [(step, value)]} of the present cells of the unbinned /health matrix (float32 values as Python floats)."""
    body = api(url, "health", run=run, stat=stat)
    raw = base64.b64decode(body["values"])
    values = struct.unpack(f"<{len(raw) // 4}f", raw)
    n = len(body["steps"])
    present = base64.b64decode(body["present"]) if body.get("present") else None
    out = {}
    for row, layer in enumerate(body["layers"]):
        cells = range(row * n, (row + 1) * n)
        out[layer] = [(body["steps"][c - row * n], values[c]) for c in cells if (present[c] if present else values[c] == values[c])]
    return out


def value_at(series, step):
    earlier = [v for s, v in series if s <= step]
    return earlier[-1] if earlier else None


def shown_step(frame) -> int:
    return int(frame.locator("#xray-step-label").inner_text().split()[-1])


def js_value(v: float) -> str:
    return "NaN" if v != v else "Infinity" if v == float("inf") else "-Infinity" if v == float("-inf") else repr(v)


def test_graph_nodes_follow_the_timeline_without_relayout(tensorboard_url, page):
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={RUN}&p.xray.view=graph&p.xray.stat=grad_l2")
    graph = frame.locator("[data-view=graph]")
    expect(graph).to_have_attribute("data-state", "ready", timeout=45_000)
    node = frame.locator('.xray-node[data-layer="conv1"]').first
    expect(node).to_have_attribute("data-value", re.compile(r".+"), timeout=20_000)
    expect(frame.locator(".xray-health-legend[data-stat=grad_l2]")).to_be_visible()
    matrix = health_matrix(tensorboard_url, RUN, "grad_l2")
    assert matrix["conv1"], "digits records health by default"

    def check_all(step):
        expect(frame.locator(".xray-health-legend")).to_have_attribute("data-step", str(step))
        for layer in ("conv1", "conv2", "fc1", "fc2", "fc3"):
            expected = value_at(matrix[layer], step)
            el = frame.locator(f'.xray-node[data-layer="{layer}"]').first
            if expected is None:
                assert el.get_attribute("data-value") is None
            else:
                assert el.get_attribute("data-value") == js_value(expected), (layer, step)

    last = shown_step(frame)
    check_all(last)
    frame.locator("body").evaluate("() => document.querySelectorAll('[data-node-id]').forEach((n) => { n.__xrayTag = 1; })")
    fills = {}
    frame.locator(".xray-brand").click()
    for key in ("Home", "ArrowRight"):
        page.keyboard.press(key)
        step = shown_step(frame)
        check_all(step)
        fills[step] = frame.locator('.xray-node[data-layer="conv1"] rect').first.evaluate("(r) => r.style.fill")
        assert graph.get_attribute("data-state") == "ready"
        same = frame.locator("body").evaluate("() => [...document.querySelectorAll('[data-node-id]')].every((n) => n.__xrayTag === 1)")
        assert same, "a step switch must recolour the drawn nodes, not draw new ones"
        ms = frame.locator("body").evaluate("() => window.xrayApp.graph.health.lastMs")
        assert ms <= 50, f"recolouring took {ms} ms"
    assert len(set(fills.values())) >= 1 and all(fills.values())
    assert not [e for e in page.xray_errors if "uncaught" in e], page.xray_errors


def test_layer_view_charts_mark_the_step(tensorboard_url, page):
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={RUN}&p.xray.view=layer&p.xray.layer=conv1")
    expect(frame.locator("#xray-layer-title")).to_have_text("conv1", timeout=30_000)
    step = shown_step(frame)
    served = api(tensorboard_url, "health_layer", run=RUN, layer="conv1")["stats"]
    for stat in ("grad_mean", "grad_absmax", "grad_l2", "weight_l2", "update_ratio"):
        chart = frame.locator(f'.xray-health-chart[data-stat="{stat}"][data-layer="conv1"][data-run="{RUN}"][data-axis=step]')
        expect(chart).to_have_attribute("data-step", str(step), timeout=20_000)
        assert int(chart.get_attribute("data-points")) == len(served[stat]["steps"]), stat  # every measured iteration
    markers = {stat: frame.locator(f'.xray-health-chart[data-stat="{stat}"][data-axis=step] .xray-health-marker').evaluate("(m) => m.style.left")
               for stat in ("grad_l2", "weight_l2", "update_ratio")}
    assert len(set(markers.values())) == 1, markers  # one step axis for every chart, whatever each statistic's pace
    chart = frame.locator('.xray-health-chart[data-stat="grad_l2"][data-axis=step]')
    marker = chart.locator(".xray-health-marker")
    expect(marker).to_be_visible()
    before = marker.evaluate("(m) => m.style.left")
    last_x = chart.locator(".u-over").evaluate("(o) => o.clientWidth")
    assert float(before.rstrip("px")) > last_x / 2, "the last step is marked on the right half of the chart"
    frame.locator("#xray-layer-title").click()
    page.keyboard.press("Home")
    first = shown_step(frame)
    assert first < step
    expect(chart).to_have_attribute("data-step", str(first))
    assert marker.evaluate("(m) => m.style.left") != before
    assert not [e for e in page.xray_errors if "uncaught" in e], page.xray_errors


@pytest.fixture(scope="module")
def dead_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("health_dead_logdir")
    record_dead(root / HEALTH_DEAD)
    with tensorboard(sys.executable, root, cwd=tmp_path_factory.mktemp("tb_health_dead")) as base:
        yield base


def test_dead_units_are_outlined_and_the_prune_plan_shown(dead_url, page):
    frame = open_tab(page, dead_url, f"&p.xray.run={HEALTH_DEAD}&p.xray.view=layer&p.xray.layer=hidden&p.xray.kind=activation")
    panel = frame.locator(f'.xray-panel[data-run="{HEALTH_DEAD}"][data-kind=activation][data-state=ready]')
    expect(panel).to_have_attribute("data-dead-units", re.compile(r".*"), timeout=30_000)
    step = int(panel.get_attribute("data-step"))
    vector = api(dead_url, "health_vector", run=HEALTH_DEAD, stat="dead", layer="hidden", step=step)
    dead = [i for i, v in enumerate(vector["values"]) if v >= 0.5]
    assert dead == list(range(DEAD_UNITS))
    expect(panel).to_have_attribute("data-dead-units", ",".join(map(str, dead)))
    overlay = panel.locator("canvas.xray-dead-overlay")
    expect(overlay).to_be_visible()
    assert overlay.get_attribute("data-outlined") == ",".join(map(str, dead))
    plan = api(dead_url, "prune", run=HEALTH_DEAD)
    entry = next(e for e in plan["entries"] if e["layer"] == "hidden")
    prune = frame.locator('[data-prune][data-layer="hidden"]')
    expect(prune).to_have_attribute("data-units", ",".join(map(str, entry["units"])))
    assert int(prune.get_attribute("data-parameters")) == entry["parameters"]
    assert f"{len(entry['units'])} dead units" in prune.inner_text()
    assert not [e for e in page.xray_errors if "uncaught" in e], page.xray_errors


def test_findings_badge_on_the_graph(dead_url, page):
    findings = [f for f in api(dead_url, "findings", run=HEALTH_DEAD)["findings"] if f["layer"] == "hidden"]
    assert findings, "health_dead plants dead units in hidden"
    frame = open_tab(page, dead_url, f"&p.xray.run={HEALTH_DEAD}&p.xray.view=graph&p.xray.stat=dead_fraction")
    expect(frame.locator("[data-view=graph]")).to_have_attribute("data-state", "ready", timeout=45_000)
    badge = frame.locator(f'.xray-node[data-layer="hidden"] .xray-finding-badge[data-rule="{findings[0]["rule"]}"]').first
    expect(badge).to_be_attached(timeout=20_000)
    assert badge.locator("title").text_content() == findings[0]["message"]
    node = frame.locator('.xray-node[data-layer="hidden"]').first
    expect(node).to_have_attribute("data-value", re.compile(r".+"))
    value = float(node.get_attribute("data-value"))
    assert value == pytest.approx(DEAD_UNITS / 16, abs=0.2)


@pytest.fixture(scope="module")
def gpt_url(tmp_path_factory):
    from tests.transformer import record_gpt

    root = tmp_path_factory.mktemp("health_gpt_logdir")
    record_gpt(root / "gpt")
    with tensorboard(sys.executable, root, cwd=tmp_path_factory.mktemp("tb_health_gpt")) as base:
        yield base


def test_a_layer_health_covers_but_the_plan_does_not_opens_with_its_charts(gpt_url, page):
    """A finding or a matrix row can name any layer (health covers them all); the layer view opens it,
    says it is not recorded, and shows its health charts, instead of swapping in a recorded layer."""
    recorded = {layer["name"] for layer in api(gpt_url, "layers", run="gpt")["layers"]}
    layer = next(name for name in api(gpt_url, "health", run="gpt", stat="grad_l2")["layers"] if name not in recorded)
    frame = open_tab(page, gpt_url, f"&p.xray.run=gpt&p.xray.view=layer&p.xray.layer={urllib.parse.quote(layer)}")
    expect(frame.locator("#xray-layer-title")).to_have_text(layer, timeout=30_000)
    expect(frame.locator(".xray-layer-view .xray-hint")).to_contain_text("is not recorded")
    # the drafted plan lists every called module, with no kind on for this one: not "not in the plan"
    expect(frame.locator(".xray-layer-view .xray-hint")).to_contain_text("the plan records none of its kinds")
    chart = frame.locator(f'.xray-health-chart[data-stat="grad_l2"][data-layer="{layer}"][data-axis=step]')
    expect(chart).to_have_attribute("data-step", re.compile(r"\d+"), timeout=20_000)
    assert int(chart.get_attribute("data-points")) > 0
    assert not [e for e in page.xray_errors if "uncaught" in e], page.xray_errors


def test_big_graph_recolours_within_50_ms_and_groups_show_their_worst(gpt_url, page):
    frame = open_tab(page, gpt_url, "&p.xray.run=gpt&p.xray.view=graph&p.xray.stat=grad_l2")
    graph = frame.locator("[data-view=graph]")
    expect(graph).to_have_attribute("data-state", "ready", timeout=45_000)
    matrix = health_matrix(gpt_url, "gpt", "grad_l2")
    group = frame.locator('[data-group="blocks.0"][data-expanded=false]')
    expect(group).to_have_attribute("data-value", re.compile(r".+"), timeout=20_000)
    step = shown_step(frame)
    members = [value_at(series, step) for layer, series in matrix.items() if layer.startswith("blocks.0.")]
    members = [v for v in members if v is not None]
    worst = max(members, key=lambda v: (v != v or abs(v) == float("inf"), abs(v) if v == v else 0))
    assert group.get_attribute("data-value") == js_value(worst)
    frame.locator("[data-action=expand-all]").click()
    expect(graph).to_have_attribute("data-state", "ready", timeout=60_000)
    assert frame.locator(".xray-node[data-layer][data-value]").count() > 100
    frame.locator(".xray-brand").click()
    times = []
    for key in ("Home", "ArrowRight", "End"):
        page.keyboard.press(key)
        expect(frame.locator(".xray-health-legend")).to_have_attribute("data-step", str(shown_step(frame)))
        times.append(frame.locator("body").evaluate("() => window.xrayApp.graph.health.lastMs"))
    assert max(times) <= 50, times


@pytest.fixture(scope="module")
def nan_url(tmp_path_factory):
    from tests.e2e.health_runs import HEALTH_NAN, record_nan

    root = tmp_path_factory.mktemp("health_nan_logdir")
    record_nan(root / HEALTH_NAN)
    with tensorboard(sys.executable, root, cwd=tmp_path_factory.mktemp("tb_health_nan")) as base:
        yield base, HEALTH_NAN


def test_non_finite_values_take_their_own_colour(nan_url, page):
    url, run = nan_url
    frame = open_tab(page, url, f"&p.xray.run={run}&p.xray.view=graph&p.xray.stat=channel_var")
    expect(frame.locator("[data-view=graph]")).to_have_attribute("data-state", "ready", timeout=45_000)
    step = shown_step(frame)
    expected = value_at(health_matrix(url, run, "channel_var")["second"], step)
    assert expected != expected, f"second's activations are NaN after step 37; step {step} shows {expected}"
    node = frame.locator('.xray-node[data-layer="second"]').first
    expect(node).to_have_attribute("data-value", "NaN", timeout=20_000)
    assert node.locator("rect").evaluate("(r) => r.style.fill") == "rgb(255, 0, 255)"
    # legible on magenta: the sub-line as dark as the title; a recorded layer keeps its accent outline
    style = "(e) => getComputedStyle(e).fill"
    assert node.locator(".xray-node-sub").evaluate(style) == node.locator(".xray-node-title").evaluate(style) == "rgb(33, 33, 33)"
    recorded = frame.locator('.xray-node.xray-recorded[data-value="NaN"]')
    expect(recorded.first).to_be_attached()
    assert recorded.first.locator("rect").evaluate("(r) => getComputedStyle(r).strokeWidth") == "2.2px"
    plain = frame.locator('.xray-node.xray-health-coloured:not(.xray-recorded)[data-value="NaN"]')
    if plain.count():  # an unrecorded layer's outline stays thin: the two stay apart
        assert plain.first.locator("rect").evaluate("(r) => getComputedStyle(r).strokeWidth") != "2.2px"
    badge = node.locator('.xray-finding-badge[data-rule="nonfinite"]')
    expect(badge).to_have_count(1)
    assert "first non-finite value appeared in second at step 37" in badge.locator("title").text_content()
