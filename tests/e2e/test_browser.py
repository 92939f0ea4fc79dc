"""End to end: train the digits example with Xray, serve it with a real TensorBoard, and drive the Xray
tab in headless Chromium: pick the run, open conv1, check that the heatmaps hold real pixels, and scrub
through the steps with the keyboard and the slider. The other runs (non-finite weights, a very wide
output, a run to switch to, a run that gets rewritten) are recorded by the real recorder too
(tests/e2e/conftest.py); requests are intercepted only where the real stack cannot give the behaviour
deterministically, each with its reason.

Set XRAY_UPDATE_SCREENSHOT=1 to refresh docs/screenshot.png (shown in the README).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time

import pytest
from playwright.sync_api import expect

from tests.e2e.runs import (
    NONFINITE,
    REPO,
    REWRITE,
    RUN,
    SMALL,
    WIDE,
    WIDE_COLS,
    WIDE_ROWS,
    WIDE_SPIKE,
    WIDE_SPIKE_COL,
    event_files,
    record_small,
)
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


def show_layer(frame, run: str, layer: str) -> None:
    """Picks ``run`` and clicks ``layer`` in the plugin iframe, then waits for the layer's header."""
    frame.locator("#xray-run").select_option(run)
    frame.locator(f'button[data-layer="{layer}"]').click()
    expect(frame.locator("#xray-layer-title")).to_have_text(layer)


def heatmap_stats(frame) -> dict:
    """``{kind: stats}`` of every heatmap canvas of the shown layer."""
    return {s["kind"]: s for s in frame.locator(HEATMAPS).evaluate_all(f"(cs) => cs.map({CANVAS_STATS_JS})")}


def wait_frames_settled(frame):
    """Waits until no heatmap is still loading."""
    expect(frame.locator(f'{HEATMAPS}[data-state="loading"]')).to_have_count(0)
    expect(frame.locator(f'{HEATMAPS}[data-state="ready"]').first).to_be_attached()


def step_by_key(page, frame, key: str, step: int, kinds: int) -> None:
    """Moves the scrubber with ``key`` and waits until ``step`` is shown with all ``kinds`` heatmaps drawn."""
    frame.locator("#xray-layer-title").click()
    page.keyboard.press(key)
    expect(frame.locator("#xray-step-label")).to_have_text(f"step {step}")
    wait_frames_settled(frame)
    expect(frame.locator(f'{HEATMAPS}[data-state="ready"]')).to_have_count(kinds)


def record_frame_requests(page, run) -> list[str]:
    """The URLs of the frame requests the page makes for ``run`` from now on (observed, not altered)."""
    urls: list[str] = []
    pattern = re.compile(rf"/data/plugin/xray/frame_bin\?(.*&)?run={re.escape(run)}(&|$)")
    page.on("request", lambda request: urls.append(request.url) if pattern.search(request.url) else None)
    return urls


def layer_steps(url, run, layer) -> list[int]:
    """The steps at which ``layer`` of ``run`` has any kind recorded, as the real server lists them."""
    layers = get_json(f"{url}/data/plugin/xray/layers?run={run}")
    found = next((entry for entry in layers["layers"] if entry["name"] == layer), None)
    assert found is not None, f"run {run} has no layer {layer}: {[entry['name'] for entry in layers['layers']]}"
    return sorted({step for kind_steps in found["kinds"].values() for step in kind_steps})


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
    show_layer(frame, RUN, "conv1")
    expect(frame.locator("button.xray-layer.xray-selected")).to_have_attribute("data-layer", "conv1")

    # One section per recorded kind, in the documented order, each with its canvas and colour bar.
    order = [k for k in ("weight", "weight_grad", "bias", "bias_grad", "output", "activation", "grad") if k in kinds]
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
    """A failing kind keeps its banner line while the other kinds of the layer load fine."""
    message = "Not found: 'conv1' 'weight' was not recorded at step 30 (test)"

    held = []

    # Intercepted: a 404 for one kind while the layer's other kinds exist, answered before them, is not
    # something the real server gives deterministically (it serves every recorded kind).
    def fail_weight_frames(route):
        if "kind=weight&" in route.request.url:
            route.fulfill(status=404, content_type="application/json", body=json.dumps({"error": message, "code": 404}))
        else:
            held.append(route)  # answered once the weight error is up

    page.route(re.compile(r"/data/plugin/xray/frame_bin\?"), fail_weight_frames)
    frame = open_xray_tab(page, tensorboard_url)
    frame.locator('button[data-layer="conv1"]').click()
    banner = frame.locator("#xray-error")
    expect(frame.locator(f'{HEATMAPS}[data-kind="weight"]')).to_have_attribute("data-state", "error")
    expect(banner).to_contain_text(message)
    assert held, "conv1 has no kind besides weight"
    for route in held:
        route.continue_()
    wait_frames_settled(frame)
    others = frame.locator(f'{HEATMAPS}:not([data-kind="weight"])')
    assert others.count() >= 1
    expect(others.first).to_have_attribute("data-state", "ready")
    # The other kinds' successes came after the weight error and did not clear it.
    page.wait_for_timeout(300)
    expect(banner).to_be_visible()
    expect(banner).to_contain_text(message)


def test_empty_state_when_no_run_has_xray_data(empty_tensorboard_url, page):
    """A real TensorBoard over an empty logdir (started before any training wrote): the tab says how to
    get data."""
    assert get_json(f"{empty_tensorboard_url}/data/plugin/xray/runs")["runs"] == []
    frame = open_xray_tab(page, empty_tensorboard_url)
    empty = frame.locator("#xray-empty")
    expect(empty).to_be_visible()
    expect(empty).to_contain_text("No Xray data yet")
    expect(empty).to_contain_text("xray.take_graphs(step)")
    expect(frame.locator(HEATMAPS)).to_have_count(0)


def test_non_finite_values_get_their_own_colour(tensorboard_url, page):
    """A recorded weight with NaN, +Inf and -Inf draws them in the non-finite colours and shows the legend."""
    frame = open_xray_tab(page, tensorboard_url)
    show_layer(frame, NONFINITE, "conv1")
    weight = frame.locator(f'{HEATMAPS}[data-kind="weight"]')
    expect(weight).to_have_attribute("data-state", "ready")
    stats = weight.evaluate(CANVAS_STATS_JS)
    magenta = (255 << 16) | 255
    grey = (128 << 16) | (128 << 8) | 128
    assert magenta in stats["colours"], "NaN is not drawn magenta"
    assert grey in stats["colours"], "±Inf is not drawn grey"
    expect(frame.locator('section[data-kind="weight"] .xray-nonfinite-key')).to_be_visible()
    expect(frame.locator('section[data-kind="weight"] .xray-kind-info')).to_contain_text("3 non-finite")


def test_very_wide_panel_is_pooled_not_blank(tensorboard_url, chromium_browser):
    """A recorded LM-head-like output [16, 50257] at devicePixelRatio 2 is pooled down to the page width,
    says so in its info line, and the hover read-out gives the pooled value with its column range."""
    rows, cols, spike_row, spike_col = WIDE_ROWS, WIDE_COLS, 3, WIDE_SPIKE_COL
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=2)
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        frame = open_xray_tab(page, tensorboard_url)
        show_layer(frame, WIDE, "0")
        canvas = frame.locator(f'{HEATMAPS}[data-kind="output"]')
        expect(canvas).to_have_attribute("data-state", "ready")
        stats = canvas.evaluate(CANVAS_STATS_JS)
        assert 0 < stats["width"] <= 2 * 1400, stats["width"]
        assert stats["opaque"] > 0.5 * stats["width"] * stats["height"], "the wide panel is blank"
        assert stats["distinct"] >= 8
        info = frame.locator('section[data-kind="output"] .xray-kind-info')
        expect(info).to_contain_text(re.compile(r"shown at 1:\d+ across columns \(max-abs pooled\)"))
        ky, kx = map(int, canvas.get_attribute("data-pool").split("x"))
        assert ky == 1 and kx > 1
        box = canvas.bounding_box()
        shown_cols = math.ceil(cols / kx)
        x = (spike_col // kx + 0.5) * box["width"] / shown_cols
        y = (spike_row + 0.5) * box["height"] / rows
        canvas.hover(position={"x": x, "y": y})
        first = spike_col // kx * kx
        readout = frame.locator('section[data-kind="output"] .xray-readout')
        expect(readout).to_have_text(f"max-abs of [{spike_row}, {first}–{first + kx - 1}] = {WIDE_SPIKE:g}")
    finally:
        context.close()


def test_frame_cache_is_bounded_by_bytes(tensorboard_url, page):
    """The frame cache counts bytes, evicts the least recently used values, and drops a run."""
    frame = open_xray_tab(page, tensorboard_url)
    result = frame.locator("body").evaluate(
        """async () => {
          const { FrameCache } = await import(new URL('static/cache.js', document.baseURI).href);
          const cache = new FrameCache(100, (v) => v.bytes);
          const key = (run, step) => FrameCache.key(run, 'conv1', 'weight', step);
          await cache.get(key('a', 1), async () => ({ bytes: 60 }));
          await cache.get(key('a', 2), async () => ({ bytes: 30 }));
          cache.peek(key('a', 1));                       // a/1 is now the most recently used
          await cache.get(key('b', 1), async () => ({ bytes: 30 }));
          const afterEvict = [cache.peek(key('a', 1)) !== undefined, cache.peek(key('a', 2)) !== undefined,
                              cache.peek(key('b', 1)) !== undefined, cache.bytes];
          await cache.get(key('b', 2), async () => ({ bytes: 500 }));  // too big alone: kept, the rest goes
          const big = [cache.size, cache.bytes];
          cache.clearRun('b');
          return { afterEvict, big, cleared: [cache.size, cache.bytes] };
        }"""
    )
    assert result == {"afterEvict": [True, False, True, 90], "big": [1, 500], "cleared": [0, 0]}, result


def test_switching_runs_waits_for_the_new_layers(tensorboard_url, page):
    """While the new run's layers load, nothing asks the new run for the old run's layer; once they
    arrive the same layer and step are shown again."""
    steps = layer_steps(tensorboard_url, RUN, "conv1")
    assert steps[-2] in layer_steps(tensorboard_url, SMALL, "conv1"), "the two runs need a common step"
    held = []
    # Intercepted: the new run's /layers is held back (then passed on, unchanged, to the real server) to
    # open the window in which the page could ask for the old run's layer; real timing cannot hold it open.
    page.route(re.compile(rf"/data/plugin/xray/layers\?run={SMALL}$"), lambda route: held.append(route))
    small_frames = record_frame_requests(page, SMALL)

    frame = open_xray_tab(page, tensorboard_url)
    frame.locator('button[data-layer="conv1"]').click()
    wait_frames_settled(frame)
    frame.locator("#xray-layer-title").click()
    page.keyboard.press("ArrowLeft")
    label = frame.locator("#xray-step-label")
    expect(label).to_have_text(f"step {steps[-2]}")

    frame.locator("#xray-run").select_option(SMALL)
    expect(frame.locator(HEATMAPS)).to_have_count(0)
    expect(frame.locator("#xray-layer-title")).to_have_text("")
    deadline = 50
    while not held and deadline:
        page.wait_for_timeout(100)
        deadline -= 1
    assert held, "the page did not ask for the layers of the new run"
    # Scrubbing and clicking a layer of the old list meanwhile must not fetch anything.
    page.keyboard.press("ArrowLeft")
    frame.locator('button[data-layer="conv1"]').evaluate("(b) => b.click()")
    page.wait_for_timeout(300)
    assert small_frames == [], small_frames

    held[0].continue_()
    expect(frame.locator("#xray-layer-title")).to_have_text("conv1")
    expect(frame.locator("button.xray-layer.xray-selected")).to_have_attribute("data-layer", "conv1")
    expect(label).to_have_text(f"step {steps[-2]}")
    wait_frames_settled(frame)
    assert small_frames and all("layer=conv1" in url for url in small_frames), small_frames
    expect(frame.locator("#xray-error")).to_be_hidden()


def wait_until_served(url, run, run_id, steps, timeout_s=20.0):
    """Polls the real server until every kind of conv1 of ``run`` at ``steps`` comes from ``run_id``."""
    deadline = time.monotonic() + timeout_s
    seen = None
    while time.monotonic() < deadline:
        try:
            layers = get_json(f"{url}/data/plugin/xray/layers?run={run}")
            kinds = next(entry["kinds"] for entry in layers["layers"] if entry["name"] == "conv1")
            frame_url = f"{url}/data/plugin/xray/frame?run={run}&layer=conv1"
            seen = {
                (kind, step): get_json(f"{frame_url}&kind={kind}&step={step}")["meta"]["run_id"]
                for kind in kinds for step in steps
            }
            if seen and all(found == run_id for found in seen.values()):
                return
        except (OSError, ValueError, StopIteration):
            pass
        time.sleep(0.25)
    pytest.fail(f"TensorBoard still serves the old recording of {run} after {timeout_s:.0f} s: {seen}")


def test_rewritten_run_is_fetched_again(tensorboard_url, xray_logdir, page):
    """A run rewritten under the same name, with the same steps (its event files deleted and recorded
    again with other data: new run_id and wall times): after a TensorBoard reload the page drops its
    cached frames of that run and shows the new data."""
    steps = layer_steps(tensorboard_url, REWRITE, "conv1")
    assert len(steps) >= 2, steps
    fetched = record_frame_requests(page, REWRITE)
    frame = open_xray_tab(page, tensorboard_url)
    show_layer(frame, REWRITE, "conv1")
    wait_frames_settled(frame)
    expect(frame.locator("#xray-step-label")).to_have_text(f"step {steps[-1]}")
    last = heatmap_stats(frame)
    step_by_key(page, frame, "ArrowLeft", steps[-2], len(last))
    previous = heatmap_stats(frame)

    run_dir = xray_logdir / REWRITE
    for path in event_files(run_dir):
        path.unlink()
    fetched.clear()
    run_id = record_small(run_dir, seed=3)
    wait_until_served(tensorboard_url, REWRITE, run_id, steps[-2:])
    page.locator("button.reload-button").click()
    for _ in range(50):
        page.wait_for_timeout(100)
        now = heatmap_stats(frame)
        if all(s["state"] == "ready" for s in now.values()) and any(
            now[k]["hash"] != previous[k]["hash"] for k in previous
        ):
            break
    assert fetched, "the reload did not check the shown frames again"
    wait_frames_settled(frame)
    now = heatmap_stats(frame)
    assert any(now[k]["hash"] != previous[k]["hash"] for k in previous), "the rewritten frames are not shown"

    # The last step was cached before the rewrite: it is fetched again, not drawn from the cache (the
    # prefetch may fetch it before the key press; either way after the rewrite, since `fetched` was cleared).
    step_by_key(page, frame, "ArrowRight", steps[-1], len(last))
    last_step = re.compile(rf"[?&]step={steps[-1]}(&|$)")
    assert any(last_step.search(url) for url in fetched), "the last step was drawn from frames cached before the rewrite"
    again = heatmap_stats(frame)
    assert any(again[k]["hash"] != last[k]["hash"] for k in last)
    expect(frame.locator("#xray-error")).to_be_hidden()


def test_a_step_parked_on_that_a_resumed_run_lost_is_shown_again_once_recorded_again(tensorboard_url, xray_logdir, page):
    """Parked back from the end, the run resumed into its folder from an earlier step (TensorBoard's default
    loader then drops the later steps): the timeline shows the last step left without following the end,
    and goes back to the parked step once the resumed run records it again."""
    import warnings

    steps = layer_steps(tensorboard_url, REWRITE, "conv1")
    frame = open_xray_tab(page, tensorboard_url)
    show_layer(frame, REWRITE, "conv1")
    wait_frames_settled(frame)
    kinds = len(heatmap_stats(frame))
    step_by_key(page, frame, "ArrowLeft", steps[-2], kinds)  # parked: not following the end

    def resume(upto: list[int]) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "already holds Xray captures": a resumed run, on purpose
            run_id = record_small(xray_logdir / REWRITE, seed=5, steps=tuple(upto))
        deadline = time.monotonic() + 30
        while layer_steps(tensorboard_url, REWRITE, "conv1") != list(upto):
            assert time.monotonic() < deadline, (upto, layer_steps(tensorboard_url, REWRITE, "conv1"))
            time.sleep(0.25)
        wait_until_served(tensorboard_url, REWRITE, run_id, upto[-1:])
        page.locator("button.reload-button").click()

    resume(steps[:1])
    expect(frame.locator("#xray-step-label")).to_have_text(f"step {steps[0]}", timeout=15_000)
    assert frame.locator("body").evaluate("() => window.xrayApp.followEnd") is False
    resume(list(steps))
    expect(frame.locator("#xray-step-label")).to_have_text(f"step {steps[-2]}", timeout=15_000)  # back, not at the end
    assert frame.locator("body").evaluate("() => window.xrayApp.followEnd") is False


def test_tensorboard_reload_refreshes_the_run_list(tensorboard_url, xray_logdir, page):
    """TensorBoard's reload button reaches the iframe (postMessage "experimental.DataReloaded") and the
    run list picks up a new run long before the 30 s poll would. Runs last: it adds a run."""
    runs = get_json(f"{tensorboard_url}/data/plugin/xray/runs")["runs"]
    frame = open_xray_tab(page, tensorboard_url)
    options = frame.locator("#xray-run option")
    expect(options).to_have_count(len(runs))

    shutil.copytree(xray_logdir / RUN, xray_logdir / "digits_copy")
    deadline_runs = None
    for _ in range(60):  # TensorBoard re-reads the logdir every 2 s (--reload_interval in conftest)
        deadline_runs = get_json(f"{tensorboard_url}/data/plugin/xray/runs")["runs"]
        if "digits_copy" in deadline_runs:
            break
        page.wait_for_timeout(250)
    assert "digits_copy" in deadline_runs, f"TensorBoard did not pick up the copied run: {deadline_runs}"

    page.locator("button.reload-button").click()
    expect(options).to_have_count(len(runs) + 1, timeout=10_000)
    expect(frame.locator("#xray-run")).to_have_value(RUN)


def test_bias_and_its_gradient_are_drawn_with_their_values(tensorboard_url, xray_logdir, page):
    """fc1 of the digits run records its bias and bias gradient (a vector each): both are drawn as one
    row, and hovering an entry reads out the value the recorder stored."""
    from xray_tb import open_run

    frame = open_xray_tab(page, tensorboard_url)
    show_layer(frame, RUN, "fc1")
    wait_frames_settled(frame)
    run = open_run(xray_logdir / RUN)
    for kind, title in (("bias", "Bias"), ("bias_grad", "Bias gradient")):
        section = frame.locator(f'section[data-kind="{kind}"]')
        expect(section).to_contain_text(title)
        expect(section.locator(".xray-kind-info")).to_contain_text("shape 64 · 64 of 64 selected")
        canvas = section.locator(HEATMAPS)
        expect(canvas).to_have_attribute("data-state", "ready")
        stats = canvas.evaluate(CANVAS_STATS_JS)
        assert stats["distinct"] >= 8, f"{kind}: {stats['distinct']} colours for 64 values"
        values, _ = run.load("fc1", kind, int(stats["step"]))
        box = canvas.bounding_box()
        for entry in (5, 40):
            canvas.hover(position={"x": (entry + 0.5) * box["width"] / 64, "y": box["height"] / 2})
            readout = section.locator(".xray-readout")
            expect(readout).to_contain_text(f"[0, {entry}] = ")
            shown = float(readout.text_content().rsplit("= ", 1)[1])
            assert math.isclose(shown, float(values[entry]), rel_tol=1e-3, abs_tol=1e-6), (kind, entry, shown, float(values[entry]))
