"""The Xray tab's views in headless Chromium against a real TensorBoard, one test per numbered item
of the tab (issue 10): the architecture graph, the layer view, the timeline, runs side by side,
shareable URL state, export and live runs. The runs are recorded here by the real recorder from a
small residual model with nested containers; one logdir and one TensorBoard serve the module.
"""

from __future__ import annotations

import re
import sys
import time
import warnings

import pytest
import torch
from playwright.sync_api import expect
from torch import nn
from torch.nn import functional as F

from tests.tensorboard_server import get_json, tensorboard
from xray_tb import Xray, open_run

pytestmark = [pytest.mark.browser, pytest.mark.slow]

IFRAME = 'iframe[src*="plugin_entry.html?name=xray"]'
MAIN, OTHER, WIDER, LIVE = "a_main", "b_other", "c_wider", "d_live"
MAIN_STEPS, OTHER_STEPS = [0, 10, 20, 30], [0, 15, 30]
PLAN = {"stem": {"weight": True, "output": True}, "blocks.0.conv1": {"weight": True, "output": True}, "head.1": {"weight": True}}


class Block(nn.Module):
    """conv -> BN -> ReLU -> conv, plus the input (a residual edge), then the same ReLU again."""

    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return self.relu(x + self.conv2(self.relu(self.bn(self.conv1(x)))))


class Net(nn.Module):
    def __init__(self, blocks=2):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.blocks = nn.Sequential(*[Block(4) for _ in range(blocks)])
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 6 * 6, 3))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def recorder(run_dir, *, seed, blocks=2, lr=0.1):
    """An open Xray on a fresh Net and ``capture(step)``, which trains one batch and records it."""
    torch.manual_seed(seed)
    model = Net(blocks)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    xray = Xray(model, input_size=(1, 6, 6), logdir=str(run_dir), plan=PLAN)
    g = torch.Generator().manual_seed(seed)

    def capture(step):
        x, y = torch.randn(8, 1, 6, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        xray.take_graphs(step)
        optimizer.step()

    return xray, capture


def record(run_dir, steps, **kwargs):
    xray, capture = recorder(run_dir, **kwargs)
    with xray:
        for step in steps:
            capture(step)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tab_logdir")
    record(root / MAIN, MAIN_STEPS, seed=0)
    record(root / OTHER, OTHER_STEPS, seed=1, lr=0.5)
    record(root / WIDER, [0, 10], seed=2, blocks=3)
    return root


@pytest.fixture(scope="module")
def live(logdir):
    """The run d_live, recorded at steps 0 and 10 by an Xray that stays open for the test to capture more."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xray, capture = recorder(logdir / LIVE, seed=3)
    capture(0)
    capture(10)
    yield capture
    xray.close()


@pytest.fixture(scope="module")
def url(logdir, live, tmp_path_factory):
    with tensorboard(sys.executable, logdir, cwd=tmp_path_factory.mktemp("tb"), extra=["--reload_interval", "1"]) as base:
        yield base


def open_tab(page, url, hash_suffix=""):
    page.goto(f"{url}/#xray{hash_suffix}")
    frame = page.frame_locator(IFRAME)
    expect(frame.locator("#xray-run")).to_be_attached(timeout=30_000)
    return frame


def graph_ready(frame):
    expect(frame.locator('[data-view="graph"][data-state="ready"]')).to_be_visible()


def panels(frame):
    """``[{run, layer, kind, step, state}]`` of every heatmap panel."""
    return frame.locator(".xray-panel").evaluate_all("(ps) => ps.map((p) => ({...p.dataset}))")


def settled(frame):
    """Waits until a panel is drawn and none is still loading."""
    expect(frame.locator('.xray-panel[data-state="ready"]').first).to_be_attached()
    expect(frame.locator('.xray-panel[data-state="loading"]')).to_have_count(0)


def at_or_before(steps, step):
    earlier = [s for s in steps if s <= step]
    return earlier[-1] if earlier else None


def test_1_architecture_graph_groups_search_and_open(url, page):
    arch = get_json(f"{url}/data/plugin/xray/architecture?run={MAIN}")
    module_calls = [n for n in arch["nodes"] if n["kind"] == "module"]
    frame = open_tab(page, url, f"&p.xray.run={MAIN}")
    graph_ready(frame)
    graph = frame.locator('[data-view="graph"]')

    graph.locator('[data-action="expand-all"]').click()
    expect(graph.locator("[data-layer]")).to_have_count(len(module_calls))
    ids = graph.locator("[data-node-id]").evaluate_all("(ns) => ns.map((n) => n.dataset.nodeId)")
    assert sorted(ids) == sorted(n["id"] for n in arch["nodes"])
    # A reused module's calls are separate nodes: blocks.0.relu is called twice.
    expect(graph.locator('[data-layer="blocks.0.relu"]')).to_have_count(2)
    # Residual edges stay: the add of block 0 has two incoming edges.
    add = next(n["id"] for n in arch["nodes"] if n.get("op") == "add" and n["parent"] == "blocks.0")
    expect(graph.locator(f'path.xray-edge[data-dst="{add}"]')).to_have_count(2)
    # Recorded layers are marked with their kinds.
    expect(graph.locator('[data-layer="stem"]')).to_have_attribute("data-kinds", "weight,output")

    # Collapsing a group hides its members; the group stays as one box.
    members = [n["id"] for n in arch["nodes"] if n["parent"].startswith("blocks.0")]
    graph.locator('[data-group="blocks.0"] [data-action="toggle"]').click()
    expect(graph.locator('[data-group="blocks.0"]')).to_have_attribute("data-expanded", "false")
    for node_id in members:
        expect(graph.locator(f'[data-node-id="{node_id}"]')).to_have_count(0)
    expect(graph.locator('[data-layer="blocks.1.conv1"]')).to_have_count(1)
    graph.locator('[data-action="collapse-all"]').click()
    expect(graph.locator("[data-layer]")).to_have_count(len([n for n in module_calls if n["parent"] == ""]))

    # Search opens the groups around a node and marks it.
    graph.locator('input[data-action="search"]').fill("blocks.1.conv2")
    graph.locator('input[data-action="search"]').press("Enter")
    expect(graph.locator('[data-layer="blocks.1.conv2"]')).to_have_class(re.compile("xray-highlight"))

    # Clicking a recorded module opens its layer view.
    graph.locator('[data-action="expand-all"]').click()
    graph.locator('[data-layer="blocks.0.conv1"]').click()
    expect(frame.locator('[data-view="layer"]')).to_be_visible()
    expect(frame.locator("#xray-layer-title")).to_have_text("blocks.0.conv1")
    settled(frame)
    shown = panels(frame)
    assert {(p["layer"], p["kind"]) for p in shown} == {("blocks.0.conv1", "weight"), ("blocks.0.conv1", "output")}
    assert all(p["run"] == MAIN and p["step"] == str(MAIN_STEPS[-1]) for p in shown), shown


def test_2_layer_view_hover_scale_and_back(url, page, logdir):
    frame = open_tab(page, url, f"&p.xray.run={MAIN}&p.xray.view=layer&p.xray.layer=blocks.0.conv1")
    settled(frame)
    values, header = open_run(logdir / MAIN).load("blocks.0.conv1", "output", MAIN_STEPS[-1])
    panel = frame.locator('.xray-panel[data-kind="output"]')
    canvas = panel.locator("canvas.xray-heatmap")
    expect(canvas).to_have_attribute("data-state", "ready")
    # Panel 1 (filter indices[1]), row 2, column 3: cell centres from the drawn layout.
    cell = canvas.evaluate(
        """(c) => { const r = c.getBoundingClientRect(); return { w: r.width, h: r.height, cw: c.width, ch: c.height }; }"""
    )
    k, rows, cols = values.shape
    layout = frame.locator("body").evaluate(
        """() => { const p = window.xrayApp.layerView.sections.get('output').panels.get('a_main');
                   return { cells: p.layout.cells.map((c) => [c.x, c.y]), sx: p.layout.sx, sy: p.layout.sy,
                            width: p.layout.width }; }"""
    )
    scale = cell["w"] / layout["width"]
    x0, y0 = layout["cells"][1]
    canvas.hover(position={"x": (x0 + (3 + 0.5) * layout["sx"]) * scale, "y": (y0 + (2 + 0.5) * layout["sy"]) * scale})
    readout = panel.locator(".xray-readout")
    expect(readout).to_contain_text("[2, 3] = ")
    expected_index = [header.batch_index, header.indices[1], 2, 3]
    assert readout.get_attribute("data-index") == ",".join(map(str, expected_index))
    assert float(readout.get_attribute("data-value")) == pytest.approx(float(values[1, 2, 3]), rel=1e-6, abs=1e-7)
    expect(readout).to_contain_text(f"tensor[{', '.join(map(str, expected_index))}]")
    page.mouse.move(0, 0)  # off the panel: the read-out and its hooks say nothing (the hooks kept the last value)
    expect(readout).to_have_text("")
    assert readout.get_attribute("data-value") is None and readout.get_attribute("data-index") is None

    # Colours fixed over the timeline: the colour bar spans the range of every step.
    ranges = get_json(f"{url}/data/plugin/xray/ranges?run={MAIN}&layer=blocks.0.conv1")["ranges"]
    frame.locator('select[data-action="scale"]').select_option("fixed")
    expect(panel.locator(".xray-kind-info")).to_contain_text("colours fixed over the timeline")
    frame_min = float(frame.locator("body").evaluate(
        "() => window.xrayApp.layerView.sections.get('output').panels.get('a_main').frame.min"))
    assert ranges["output"]["min"] <= frame_min

    # Back to the graph, the layer marked there.
    frame.locator('[data-view="layer"] [data-action="back-to-graph"]').click()
    graph_ready(frame)
    expect(frame.locator('[data-view="graph"] [data-layer="blocks.0.conv1"]')).to_have_class(re.compile("xray-highlight"))


def test_3_timeline_plays_to_the_end_and_keys_move(url, page):
    frame = open_tab(page, url, f"&p.xray.run={MAIN}&p.xray.view=layer&p.xray.layer=stem&p.xray.step=0")
    label = frame.locator("#xray-step-label")
    expect(label).to_have_text("step 0")
    settled(frame)
    expect(frame.locator("#xray-wall-time")).not_to_have_text("")
    frame.locator('select[data-action="speed"]').select_option("16")
    frame.locator('[data-action="play"]').click()
    expect(label).to_have_text(f"step {MAIN_STEPS[-1]}")
    expect(frame.locator('[data-action="play"]')).to_have_attribute("data-playing", "false")
    settled(frame)
    assert {p["step"] for p in panels(frame)} == {str(MAIN_STEPS[-1])}
    frame.locator("#xray-layer-title").click()
    page.keyboard.press("ArrowLeft")
    expect(label).to_have_text(f"step {MAIN_STEPS[-2]}")
    page.keyboard.press("Home")
    expect(label).to_have_text("step 0")


def test_4_runs_side_by_side_follow_one_timeline(url, page):
    frame = open_tab(page, url, f"&p.xray.run={MAIN}&p.xray.view=layer&p.xray.layer=stem")
    settled(frame)
    frame.locator(f'input[data-compare-run="{OTHER}"]').check()
    expect(frame.locator(f'.xray-panel[data-run="{OTHER}"]')).to_have_count(2)
    label = frame.locator("#xray-step-label")
    timeline = sorted(set(MAIN_STEPS) | set(OTHER_STEPS))
    frame.locator("#xray-layer-title").click()
    page.keyboard.press("End")
    for step in reversed(timeline):
        expect(label).to_have_text(f"step {step}")
        settled(frame)
        for panel in panels(frame):
            if panel.get("diff"):
                continue
            steps = MAIN_STEPS if panel["run"] == MAIN else OTHER_STEPS
            assert panel["step"] == str(at_or_before(steps, step)), (step, panel)
        page.keyboard.press("ArrowLeft")
    # The difference view: run A − run B, value by value.
    diff = frame.locator('.xray-panel.xray-diff[data-kind="weight"]')
    expect(diff).to_have_attribute("data-state", "ready")
    values = frame.locator("body").evaluate(
        """() => { const s = window.xrayApp.layerView.sections.get('weight');
                   const [a, b, d] = [s.panels.get('a_main').frame, s.panels.get('b_other').frame, s.diff.frame];
                   return [a.decoded[0].values[4], b.decoded[0].values[4], d.decoded[0].values[4]]; }"""
    )
    assert values[2] == pytest.approx(values[0] - values[1], abs=1e-6)

    # Differences in architecture are shown on the graph.
    frame.locator(f'input[data-compare-run="{OTHER}"]').uncheck()
    frame.locator(f'input[data-compare-run="{WIDER}"]').check()
    frame.locator('[data-view="layer"] [data-action="back-to-graph"]').click()
    graph_ready(frame)
    legend = frame.locator(".xray-graph-legend")
    expect(legend).to_contain_text(f"only in {WIDER}")
    expect(legend).to_contain_text("blocks.2")


def test_4_the_difference_view_draws_with_colours_fixed_over_the_timeline(url, page):
    """With fixed colours a panel is drawn once its run's ranges arrive, after the frame: the difference
    view follows it then, as it does with per-frame colours."""
    frame = open_tab(page, url, f"&p.xray.run={MAIN},{OTHER}&p.xray.view=layer&p.xray.layer=stem&p.xray.kind=weight&p.xray.scale=fixed")
    expect(frame.locator("#xray-layer-title")).to_have_text("stem")
    expect(frame.locator('.xray-panel.xray-diff[data-kind="weight"]')).to_have_attribute("data-state", "ready")


def test_4_a_layer_one_compared_run_lacks_asks_that_run_for_nothing(url, page):
    """blocks.2 exists only in the wider model: its health charts show, and the run whose model has no
    such layer is not asked for its health (a 404, a console error)."""
    missing = []  # the plugin's requests answered 404
    page.on("response", lambda r: missing.append(r.url.split("/data/plugin/xray/")[-1]) if r.status == 404 else None)
    frame = open_tab(page, url, f"&p.xray.run={WIDER},{MAIN}&p.xray.view=layer&p.xray.layer=blocks.2.conv1")
    expect(frame.locator("#xray-layer-title")).to_have_text("blocks.2.conv1")
    expect(frame.locator('.xray-health-chart, [data-stat]').first).to_be_attached()
    page.wait_for_timeout(800)
    assert missing == [] and [e for e in page.xray_errors if "404" in e] == []


def test_5_url_restores_the_view(url, page, chromium_browser):
    frame = open_tab(page, url, f"&p.xray.run={MAIN},{OTHER}&p.xray.view=layer&p.xray.layer=stem&p.xray.kind=weight&p.xray.step=20")
    expect(frame.locator("#xray-layer-title")).to_have_text("stem")
    expect(frame.locator("#xray-step-label")).to_have_text("step 20")
    expect(frame.locator(f'input[data-compare-run="{OTHER}"]')).to_be_checked()
    settled(frame)
    assert {(p["run"], p["kind"], p["step"]) for p in panels(frame) if not p.get("diff")} == {(MAIN, "weight", "20"), (OTHER, "weight", "15")}
    # Navigating writes the state back into the page's URL ...
    frame.locator("#xray-layer-title").click()
    page.keyboard.press("ArrowLeft")
    expect(frame.locator("#xray-step-label")).to_have_text("step 15")
    deadline = time.monotonic() + 5
    while "p.xray.step=15" not in page.url and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert "p.xray.step=15" in page.url, page.url
    # ... and a copied URL restores the view in a fresh page.
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        other = context.new_page()
        other.goto(page.url)
        copy = other.frame_locator(IFRAME)
        expect(copy.locator("#xray-layer-title")).to_have_text("stem", timeout=30_000)
        expect(copy.locator("#xray-step-label")).to_have_text("step 15")
        expect(copy.locator(f'input[data-compare-run="{OTHER}"]')).to_be_checked()
        expect(copy.locator('.xray-panel[data-kind="output"]')).to_have_count(0)
    finally:
        context.close()


def test_5_a_link_pasted_into_the_open_tab_is_followed_and_one_naming_what_is_missing_says_so(url, page):
    frame = open_tab(page, url, f"&p.xray.run={MAIN}")
    expect(frame.locator('[data-view="graph"]')).to_be_visible()
    page.evaluate(f"() => {{ location.hash = '#xray&p.xray.run={OTHER}&p.xray.view=layer&p.xray.layer=stem&p.xray.step=15'; }}")
    expect(frame.locator("#xray-layer-title")).to_have_text("stem")
    expect(frame.locator("#xray-step-label")).to_have_text("step 15")
    expect(frame.locator("#xray-run")).to_have_value(OTHER)
    page.evaluate("() => { location.hash = '#xray&p.xray.run=gone&p.xray.view=layer&p.xray.layer=stem'; }")
    expect(frame.locator("#xray-error")).to_contain_text(f"The link's run 'gone' is not in this logdir; showing '{OTHER}'.")
    page.evaluate(f"() => {{ location.hash = '#xray&p.xray.run={MAIN}&p.xray.view=layer&p.xray.layer=renamed'; }}")
    expect(frame.locator("#xray-error")).to_contain_text(f"The link's layer 'renamed' is not in run '{MAIN}'; showing")
    expect(frame.locator("#xray-run")).to_have_value(MAIN)
    # A mistyped run with a layer: the run's closest match is shown, and said, with no word of the layer it has
    # (the layer's note used to replace the run's, and blame a layer the run holds).
    page.evaluate(f"() => {{ location.hash = '#xray&p.xray.run={OTHER}&p.xray.view=graph'; }}")
    expect(frame.locator("#xray-run")).to_have_value(OTHER)
    page.evaluate("() => { location.hash = '#xray&p.xray.run=a_mian&p.xray.view=layer&p.xray.layer=stem'; }")
    expect(frame.locator("#xray-error")).to_contain_text(
        f"The link's run 'a_mian' (did you mean '{MAIN}'?) is not in this logdir; showing '{MAIN}'.")
    expect(frame.locator("#xray-run")).to_have_value(MAIN)
    expect(frame.locator("#xray-layer-title")).to_have_text("stem")
    expect(frame.locator("#xray-error")).not_to_contain_text("The link's layer")
    assert [e for e in page.xray_errors if e.startswith("uncaught")] == []


def test_6_export_png_and_gif(url, page):
    frame = open_tab(page, url, f"&p.xray.run={MAIN}&p.xray.view=layer&p.xray.layer=stem")
    settled(frame)
    with page.expect_download() as download:
        frame.locator('.xray-panel[data-kind="weight"] [data-action="export-png"]').click()
    png = open(download.value.path(), "rb").read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 200
    href = frame.locator('section[data-kind="weight"] [data-action="export-gif"]').get_attribute("href")
    response = page.request.get(f"{url}/data/plugin/xray/{href.lstrip('./')}")
    assert response.status == 200 and response.headers["content-type"] == "image/gif"
    from PIL import Image
    import io

    assert Image.open(io.BytesIO(response.body())).n_frames == len(MAIN_STEPS)


def test_7_live_run_shows_a_new_capture_after_reload(url, page, live):
    frame = open_tab(page, url, f"&p.xray.run={LIVE}&p.xray.view=layer&p.xray.layer=stem")
    label = frame.locator("#xray-step-label")
    expect(label).to_have_text("step 10")
    settled(frame)
    frame.locator("body").evaluate("() => { window.xrayMarker = 'kept'; }")
    live(20)
    deadline = time.monotonic() + 20
    while 20 not in get_json(f"{url}/data/plugin/xray/layers?run={LIVE}")["steps"]:
        assert time.monotonic() < deadline, "TensorBoard did not pick up the new capture"
        time.sleep(0.25)
    page.locator("button.reload-button").click()
    expect(label).to_have_text("step 20")
    settled(frame)
    assert {p["step"] for p in panels(frame)} == {"20"}
    assert frame.locator("body").evaluate("() => window.xrayMarker") == "kept"  # no page reload
    expect(frame.locator("#xray-layer-title")).to_have_text("stem")
    wall = frame.locator("#xray-wall-time")
    expect(wall).not_to_have_text("")
    shown = wall.text_content()
    page.locator("button.reload-button").click()  # a reload that brings nothing new keeps the frame's wall time
    settled(frame)
    page.wait_for_timeout(500)
    expect(wall).to_have_text(shown)
