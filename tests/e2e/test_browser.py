"""End to end: train the digits example with Xray, serve it with a real TensorBoard, and drive the Xray
tab in headless Chromium: pick the run, open conv1, check that the heatmaps hold real pixels, and scrub
through the steps with the keyboard and the slider.

Set XRAY_UPDATE_SCREENSHOT=1 to refresh docs/screenshot.png (shown in the README).
"""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import REPO, RUN
from tests.tensorboard_server import get_json

pytestmark = [pytest.mark.browser, pytest.mark.slow]

IFRAME = 'iframe[src*="plugin_entry.html?name=xray"]'
HEATMAPS = "canvas.xray-heatmap"

# Per canvas: size, opaque pixels, distinct colours and a hash of the RGBA bytes.
CANVAS_STATS_JS = """
(canvas) => {
  const { data } = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
  const colours = new Set();
  let opaque = 0;
  let hash = 2166136261;
  for (let i = 0; i < data.length; i += 4) {
    if (data[i + 3] !== 0) {
      opaque++;
      colours.add((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]);
    }
  }
  for (let i = 0; i < data.length; i++) hash = Math.imul(hash ^ data[i], 16777619) >>> 0;
  return { kind: canvas.dataset.kind, step: canvas.dataset.step, state: canvas.dataset.state,
           width: canvas.width, height: canvas.height, opaque, distinct: colours.size, hash,
           colours: [...colours].slice(0, 4096) };
}
"""


def open_xray_tab(page, url):
    """Opens TensorBoard on the Xray tab and returns the plugin iframe's locator."""
    page.goto(f"{url}/#xray")
    frame = page.frame_locator(IFRAME)
    expect(frame.locator("#xray-run")).to_be_attached(timeout=30_000)
    return frame


def heatmap_stats(frame) -> dict:
    """``{kind: stats}`` of every heatmap canvas of the shown layer."""
    return {s["kind"]: s for s in frame.locator(HEATMAPS).evaluate_all(f"(cs) => cs.map({CANVAS_STATS_JS})")}


def wait_frames_settled(frame):
    """Waits until no heatmap is still loading."""
    expect(frame.locator(f'{HEATMAPS}[data-state="loading"]')).to_have_count(0)
    expect(frame.locator(f'{HEATMAPS}[data-state="ready"]').first).to_be_attached()


def at_or_before(steps, step):
    earlier = [s for s in steps if s <= step]
    return earlier[-1] if earlier else None


def test_xray_tab_draws_conv1_and_scrubs(tensorboard_url, page, tmp_path):
    layers = get_json(f"{tensorboard_url}/data/plugin/xray/layers?run={RUN}")
    conv1 = next((layer for layer in layers["layers"] if layer["name"] == "conv1"), None)
    assert conv1 is not None, f"the digits run has no conv1 layer: {[layer['name'] for layer in layers['layers']]}"
    kinds = conv1["kinds"]
    steps = sorted({step for kind_steps in kinds.values() for step in kind_steps})
    assert len(steps) >= 2, f"conv1 needs two recorded steps to scrub, got {steps}"

    frame = open_xray_tab(page, tensorboard_url)
    frame.locator("#xray-run").select_option(RUN)
    frame.locator('button[data-layer="conv1"]').click()
    expect(frame.locator("#xray-layer-title")).to_have_text("conv1")
    expect(frame.locator("button.xray-layer.xray-selected")).to_have_attribute("data-layer", "conv1")

    # One section per recorded kind, in the documented order, each with its canvas and colour bar.
    order = [k for k in ("weight", "weight_grad", "output", "activation", "grad") if k in kinds]
    expect(frame.locator(HEATMAPS)).to_have_count(len(order))
    assert frame.locator(HEATMAPS).evaluate_all("(cs) => cs.map((c) => c.dataset.kind)") == order
    wait_frames_settled(frame)

    label = frame.locator("#xray-step-label")
    expect(label).to_have_text(f"step {steps[-1]}")
    before = heatmap_stats(frame)
    for kind, stats in before.items():
        assert stats["state"] == "ready", f"{kind}: {stats['state']}"
        assert stats["width"] >= 48 and stats["height"] >= 48, f"{kind} canvas is too small: {stats}"
        assert stats["opaque"] > 0.2 * stats["width"] * stats["height"], f"{kind} canvas is mostly blank"
        assert stats["distinct"] >= 4, f"{kind} canvas has {stats['distinct']} colours"
    assert max(s["distinct"] for s in before.values()) >= 8
    expect(frame.locator("canvas.xray-colorbar").first).to_be_visible()
    expect(frame.locator("#xray-error")).to_be_hidden()

    page.screenshot(path=str(tmp_path / "xray_tab.png"), full_page=True)
    if os.environ.get("XRAY_UPDATE_SCREENSHOT") == "1":
        (REPO / "docs").mkdir(exist_ok=True)
        shutil.copyfile(tmp_path / "xray_tab.png", REPO / "docs" / "screenshot.png")

    # Keyboard: the left arrow moves the scrubber one recorded step back.
    frame.locator("#xray-layer-title").click()
    page.keyboard.press("ArrowLeft")
    previous = steps[-2]
    expect(label).to_have_text(f"step {previous}")
    expect(frame.locator("#xray-step")).to_have_value(str(len(steps) - 2))
    wait_frames_settled(frame)
    after = heatmap_stats(frame)
    for kind, stats in after.items():
        assert stats["step"] == str(at_or_before(kinds[kind], previous)), f"{kind} shows step {stats['step']}"
    changed = [kind for kind in order if after[kind]["hash"] != before[kind]["hash"]]
    assert changed, "no heatmap changed after moving to the previous step"

    # Slider: set the value and dispatch input, as a drag does.
    frame.locator("#xray-step").evaluate(
        "(el) => { el.value = '0'; el.dispatchEvent(new Event('input', { bubbles: true })); }"
    )
    expect(label).to_have_text(f"step {steps[0]}")
    wait_frames_settled(frame)
    first = heatmap_stats(frame)
    assert any(first[kind]["hash"] != after[kind]["hash"] for kind in order), "step 0 drew the same pixels"

    # Back to the end with the right arrow; the cached frames draw the first pictures again.
    for _ in range(len(steps) - 1):
        page.keyboard.press("ArrowRight")
    expect(label).to_have_text(f"step {steps[-1]}")
    wait_frames_settled(frame)
    again = heatmap_stats(frame)
    assert {k: s["hash"] for k, s in again.items()} == {k: s["hash"] for k, s in before.items()}

    expect(frame.locator("#xray-error")).to_be_hidden()
    problems = [e for e in page.xray_errors if e.startswith("uncaught") or "[xray]" in e]
    assert not problems, problems


def test_api_errors_show_in_the_banner(tensorboard_url, page):
    message = "Not found: 'conv1' 'weight' was not recorded at step 30 (test)"

    def fail_frames(route):
        route.fulfill(status=404, content_type="application/json", body=json.dumps({"error": message, "code": 404}))

    page.route(re.compile(r"/data/plugin/xray/frame\?"), fail_frames)
    frame = open_xray_tab(page, tensorboard_url)
    frame.locator('button[data-layer="conv1"]').click()
    banner = frame.locator("#xray-error")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text(message)
    expect(frame.locator(f'{HEATMAPS}[data-state="error"]').first).to_be_attached()


def test_empty_state_when_no_run_has_xray_data(tensorboard_url, page):
    page.route(
        re.compile(r"/data/plugin/xray/runs$"),
        lambda route: route.fulfill(status=200, content_type="application/json", body='{"runs": []}'),
    )
    frame = open_xray_tab(page, tensorboard_url)
    empty = frame.locator("#xray-empty")
    expect(empty).to_be_visible()
    expect(empty).to_contain_text("No Xray data yet")
    expect(empty).to_contain_text("xray.take_graphs(step)")
    expect(frame.locator(HEATMAPS)).to_have_count(0)


def test_non_finite_values_get_their_own_colour(tensorboard_url, page):
    """A frame with NaN and ±Inf draws them in the non-finite colours and shows the legend."""
    import base64
    import struct

    values = [float("nan"), float("inf"), float("-inf"), -1.0, 0.0, 1.0]
    body = {
        "run": RUN, "layer": "conv1", "kind": "weight", "step": 0, "wall_time": 1.0,
        "meta": {"run_id": "x", "original_shape": [2, 3], "dtype": "float32", "dim": 0,
                 "indices": [0, 1], "batch_index": None, "selector": "KeepAll()"},
        "panels": [{"index": None, "rows": 2, "cols": 3,
                    "data": base64.b64encode(struct.pack("<6f", *values)).decode("ascii")}],
        "min": -1.0, "max": 1.0, "signed": True, "nonfinite": 3,
    }

    def weight_frames(route):
        if "kind=weight&" in route.request.url:
            route.fulfill(status=200, content_type="application/json", body=json.dumps(body))
        else:
            route.continue_()

    page.route(re.compile(r"/data/plugin/xray/frame\?"), weight_frames)
    frame = open_xray_tab(page, tensorboard_url)
    frame.locator('button[data-layer="conv1"]').click()
    weight = frame.locator(f'{HEATMAPS}[data-kind="weight"]')
    expect(weight).to_have_attribute("data-state", "ready")
    stats = weight.evaluate(CANVAS_STATS_JS)
    magenta = (255 << 16) | 255
    grey = (128 << 16) | (128 << 8) | 128
    assert magenta in stats["colours"], "NaN is not drawn magenta"
    assert grey in stats["colours"], "±Inf is not drawn grey"
    expect(frame.locator('section[data-kind="weight"] .xray-nonfinite-key')).to_be_visible()
    expect(frame.locator('section[data-kind="weight"] .xray-kind-info')).to_contain_text("3 non-finite")


def test_tensorboard_reload_refreshes_the_run_list(tensorboard_url, xray_logdir, page):
    """TensorBoard's reload button reaches the iframe (postMessage "experimental.DataReloaded") and the
    run list picks up a new run long before the 30 s poll would. Runs last: it adds a run."""
    frame = open_xray_tab(page, tensorboard_url)
    options = frame.locator("#xray-run option")
    expect(options).to_have_count(1)

    shutil.copytree(xray_logdir / RUN, xray_logdir / "digits_copy")
    deadline_runs = None
    for _ in range(60):  # TensorBoard re-reads the logdir every 2 s (--reload_interval in conftest)
        deadline_runs = get_json(f"{tensorboard_url}/data/plugin/xray/runs")["runs"]
        if "digits_copy" in deadline_runs:
            break
        page.wait_for_timeout(250)
    assert "digits_copy" in deadline_runs, f"TensorBoard did not pick up the copied run: {deadline_runs}"

    page.locator("button.reload-button").click()
    expect(options).to_have_count(2, timeout=10_000)
    expect(frame.locator("#xray-run")).to_have_value(RUN)
