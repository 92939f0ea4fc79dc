"""The tab's training-health parts in headless Chromium against a real TensorBoard (issue 17, items 1
and 2): the findings listed above the views and marked on the timeline, and the health matrix. The
runs are recorded by the real recorder (tests/e2e/health_runs.py): a NaN planted in a weight, planted
dead units, a one-iteration gradient spike in 3000 measured iterations.
"""

from __future__ import annotations

import base64
import math
import urllib.parse

import numpy as np
import pytest
from playwright.sync_api import expect

from tests.e2e.runs import SMALL, WIDE
from tests.e2e.health_runs import (
    DEAD_UNITS,
    HEALTH_DEAD,
    HEALTH_NAN,
    HEALTH_OFF,
    HEALTH_SPIKE,
    HIDDEN,
    NAN_STEP,
    SPIKE_ITERATIONS,
    SPIKE_STEP,
)
from tests.e2e.tab_page import open_tab, plugin_frame
from tests.tensorboard_server import get_json

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MATRIX = ".xray-health-matrix"


def app_state(page) -> dict:
    return plugin_frame(page).evaluate("() => ({...window.xrayApp.store.state})")


def url_data(page) -> dict:
    entries = urllib.parse.unquote(page.evaluate("() => location.hash")).lstrip("#").split("&")
    return dict(e[len("p.xray."):].split("=", 1) for e in entries if e.startswith("p.xray."))


def health(url, run, stat, columns=None) -> dict:
    """The server's /health answer with values and present decoded."""
    query = {"run": run, "stat": stat, **({"columns": columns} if columns else {})}
    body = get_json(f"{url}/data/plugin/xray/health?{urllib.parse.urlencode(query)}")
    rows, cols = len(body["layers"]), len(body["steps"])
    values = np.frombuffer(base64.b64decode(body["values"]), dtype="<f4").reshape(rows, cols)
    present = (np.frombuffer(base64.b64decode(body["present"]), dtype=np.uint8).reshape(rows, cols)
               if "present" in body else ~np.isnan(values))
    return {**body, "values": values, "present": present.astype(bool)}


def drawn_values(text: str) -> list:
    """A row's data-values: floats, None where there is no value."""
    return [None if v == "" else float(v) for v in text.split(",")]


def server_row(h: dict, layer: str) -> list:
    r = h["layers"].index(layer)
    return [float(v) if p else None for v, p in zip(h["values"][r], h["present"][r])]


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        (x is None and y is None) or (x is not None and y is not None and (x == y or (math.isnan(x) and math.isnan(y))))
        for x, y in zip(a, b))


def recorded_steps(url, run, layer) -> list[int]:
    layers = get_json(f"{url}/data/plugin/xray/layers?run={run}")["layers"]
    info = next(l for l in layers if l["name"] == layer)
    return sorted({s for steps in info["kinds"].values() for s in steps})


def test_findings_are_listed_above_the_views_marked_on_the_timeline_and_open_their_layer(tensorboard_url, page):
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={HEALTH_NAN}")
    finding = frame.locator(f'[data-finding][data-rule="nonfinite"][data-run="{HEALTH_NAN}"]')
    expect(finding).to_have_count(1)
    expect(finding).to_have_attribute("data-layer", "second")
    expect(finding).to_have_attribute("data-step", str(NAN_STEP))
    expect(finding).to_contain_text("nonfinite")
    # The list sits above the views, the severe finding first.
    expect(frame.locator('[data-view="graph"]')).to_be_visible()
    assert finding.bounding_box()["y"] < frame.locator('[data-view="graph"]').bounding_box()["y"]
    assert frame.locator("[data-finding]").first.get_attribute("data-rule") == "nonfinite"
    # The step is marked over the scrubber.
    mark = frame.locator(f'[data-timeline-mark][data-step="{NAN_STEP}"][data-rule="nonfinite"]')
    expect(mark).to_have_count(1)
    assert "nonfinite" in mark.get_attribute("title") and "second" in mark.get_attribute("title")
    track = frame.locator(".xray-range-wrap").bounding_box()
    box = mark.bounding_box()
    assert track["x"] <= box["x"] <= track["x"] + track["width"]

    # A non-finite value opens at the first capture at or after its step, where it shows, and the
    # tab says that its own step has no capture.
    finding.click()
    expect(frame.locator('[data-view="layer"]')).to_be_visible()
    expect(frame.locator("#xray-layer-title")).to_have_text("second")
    expected = min(s for s in recorded_steps(tensorboard_url, HEALTH_NAN, "second") if s >= NAN_STEP)
    assert expected != NAN_STEP
    expect(frame.locator("#xray-error")).to_contain_text(f"Step {NAN_STEP} has no capture: showing step {expected}, the first capture after it.")
    expect(frame.locator("#xray-step-label")).to_have_text(f"step {expected}")
    state = app_state(page)
    assert (state["view"], state["layer"], state["step"]) == ("layer", "second", expected)
    page.wait_for_function("() => decodeURIComponent(location.hash).includes('p.xray.layer=second')")
    assert url_data(page)["view"] == "layer" and url_data(page)["step"] == str(expected)
    # Moving on clears the notice; the timeline's mark opens the same capture as the finding.
    frame.locator("body").press("Home")
    expect(frame.locator("#xray-step-label")).to_have_text("step 0")
    expect(frame.locator("#xray-error")).to_be_hidden()
    mark.click()
    expect(frame.locator("#xray-step-label")).to_have_text(f"step {expected}")
    # The notice is of that run: another run shown clears it (it used to stay until the timeline moved).
    finding.click()
    expect(frame.locator("#xray-error")).to_contain_text(f"Step {NAN_STEP} has no capture")
    frame.locator("#xray-run").select_option(SMALL)
    expect(frame.locator("#xray-run")).to_have_value(SMALL)
    expect(frame.locator("#xray-error")).to_be_hidden()
    assert [e for e in page.xray_errors if e.startswith("uncaught")] == []


def test_a_run_without_findings_says_so_in_one_line(tensorboard_url, page):
    assert get_json(f"{tensorboard_url}/data/plugin/xray/findings?run={SMALL}")["findings"] == []
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={SMALL}")
    line = frame.locator(f'.xray-findings-none[data-run="{SMALL}"]')
    expect(line).to_have_text(f"{SMALL}: no findings")
    expect(frame.locator("[data-finding]")).to_have_count(0)


def test_a_run_recorded_with_health_off_says_nothing_was_checked(tensorboard_url, page):
    """Not "no findings" nor "no dead units to prune", which read as healthy; and no request for the
    health it does not have (each 404 is a console error)."""
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={HEALTH_OFF}&p.xray.view=layer&p.xray.layer=second")
    line = frame.locator(f'.xray-findings-none[data-run="{HEALTH_OFF}"]')
    expect(line).to_have_attribute("data-health", "off")
    expect(line).to_contain_text("training health was off (recorded with health=False)")
    prune = frame.locator('[data-prune][data-layer="second"]')
    expect(prune).to_have_attribute("data-prune", "off")
    expect(prune).to_contain_text("Training health was off for this run")
    expect(frame.locator(".xray-panel").first).to_be_visible()  # the heatmaps ask for dead units: not here
    page.wait_for_timeout(500)
    assert [e for e in page.xray_errors if "404" in e or e.startswith("uncaught")] == []


def test_a_layer_without_an_activation_asks_for_no_dead_units(tensorboard_url, page):
    """The last layer (an output, nothing after it) has no dead-unit vector: the tab does not ask (a 404
    would be a console error in ordinary use)."""
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={WIDE}&p.xray.view=layer&p.xray.layer=0")
    expect(frame.locator(".xray-panel").first).to_be_visible()
    page.wait_for_timeout(800)
    assert [e for e in page.xray_errors if "404" in e] == []


def test_health_matrix_rows_are_the_server_values_and_show_the_planted_dead_fraction(tensorboard_url, page):
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={HEALTH_DEAD}")
    frame.locator('[data-action="health-view"]').click()
    view = frame.locator('[data-view="health"]')
    expect(view).to_be_visible()
    frame.locator('select[data-action="health-stat"]').select_option("dead_fraction")
    matrix = view.locator(f'{MATRIX}[data-run="{HEALTH_DEAD}"][data-stat="dead_fraction"][data-state="ready"]')
    expect(matrix).to_have_count(1)
    page.wait_for_function("() => decodeURIComponent(location.hash).includes('p.xray.stat=dead_fraction')")
    assert url_data(page)["view"] == "health"

    h = health(tensorboard_url, HEALTH_DEAD, "dead_fraction", matrix.get_attribute("data-columns"))
    assert [int(s) for s in matrix.get_attribute("data-steps").split(",")] == h["steps"]
    rows = matrix.locator(".xray-health-row[data-layer]")
    assert [rows.nth(i).get_attribute("data-layer") for i in range(rows.count())] == h["layers"]  # dataflow order
    for layer in h["layers"]:
        drawn = drawn_values(matrix.locator(f'[data-layer="{layer}"]').get_attribute("data-values"))
        assert same(drawn, server_row(h, layer)), layer
    hidden = [v for v in drawn_values(matrix.locator('[data-layer="hidden"]').get_attribute("data-values")) if v is not None]
    assert hidden and all(v == DEAD_UNITS / HIDDEN for v in hidden)


def test_the_url_restores_the_matrix_and_binning_keeps_the_spike(tensorboard_url, page):
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={HEALTH_SPIKE}&p.xray.view=health&p.xray.stat=grad_l2")
    view = frame.locator('[data-view="health"]')
    expect(view).to_be_visible()
    expect(frame.locator('select[data-action="health-stat"]')).to_have_count(1)
    expect(frame.locator('select[data-action="health-stat"]')).to_have_value("grad_l2")
    matrix = view.locator(f'{MATRIX}[data-run="{HEALTH_SPIKE}"][data-stat="grad_l2"][data-state="ready"]')
    expect(matrix).to_have_count(1)
    columns = int(matrix.get_attribute("data-columns"))
    canvas = matrix.locator("canvas")
    width = canvas.evaluate("(c) => c.width")
    assert columns <= width  # never more columns than drawn device pixels
    steps = [int(s) for s in matrix.get_attribute("data-steps").split(",")]
    assert len(steps) <= columns < SPIKE_ITERATIONS  # binned on the server
    h = health(tensorboard_url, HEALTH_SPIKE, "grad_l2", columns)
    assert h.get("binned") and h["steps"] == steps
    spike_col = max(j for j, s in enumerate(steps) if s <= SPIKE_STEP)
    for layer in h["layers"]:
        drawn = drawn_values(matrix.locator(f'[data-layer="{layer}"]').get_attribute("data-values"))
        assert same(drawn, server_row(h, layer)), layer
        finite = [(v, j) for j, v in enumerate(drawn) if v is not None and math.isfinite(v)]
        assert max(finite)[1] == spike_col, layer  # the spike's bin holds the row's largest value

    # Hovering the spike's column reads the bin's step range out; a click opens the layer there.
    first, last = steps[spike_col], h["last_steps"][spike_col]
    x0, x1 = steps[0], h["last_steps"][-1] + 1
    box = canvas.bounding_box()
    x = box["x"] + ((first + last + 1) / 2 - x0) / (x1 - x0) * box["width"]
    y = box["y"] + 7
    page.mouse.move(x, y)
    readout = view.locator(".xray-health-readout")
    expect(readout).to_have_attribute("data-layer", h["layers"][0])
    assert int(readout.get_attribute("data-step")) <= SPIKE_STEP <= int(readout.get_attribute("data-last-step"))
    assert float(readout.get_attribute("data-value")) == server_row(h, h["layers"][0])[spike_col]
    page.mouse.click(x, y)
    expect(frame.locator('[data-view="layer"]')).to_be_visible()
    state = app_state(page)
    assert state["view"] == "layer" and state["layer"] == h["layers"][0]
    assert state["step"] == max(s for s in recorded_steps(tensorboard_url, HEALTH_SPIKE, state["layer"]) if s <= first)
    # The spike is a severe finding: marked on the timeline.
    expect(frame.locator(f'[data-timeline-mark][data-step="{SPIKE_STEP}"][data-rule="exploding_gradient"]')).to_have_count(1)


def test_a_nan_cell_opens_the_first_capture_after_it_where_the_nan_shows(tensorboard_url, page):
    """Health measures more steps than captures: a NaN cell at a step without frames opens the first
    capture after it (as the nonfinite finding does), a finite cell the last capture before it."""
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={HEALTH_NAN}&p.xray.view=health&p.xray.stat=weight_l2")
    matrix = frame.locator(f'{MATRIX}[data-run="{HEALTH_NAN}"][data-stat="weight_l2"][data-state="ready"]')
    expect(matrix).to_have_count(1, timeout=30_000)
    h = health(tensorboard_url, HEALTH_NAN, "weight_l2", int(matrix.get_attribute("data-columns")))
    assert not h.get("binned")
    row, steps = h["layers"].index("second"), h["steps"]
    nan_col = steps.index(NAN_STEP)
    assert h["present"][row, nan_col] and math.isnan(h["values"][row, nan_col])
    finite_col = max(j for j, s in enumerate(steps) if s < NAN_STEP and s % 10 and h["present"][row, j])
    captures = recorded_steps(tensorboard_url, HEALTH_NAN, "second")
    assert NAN_STEP not in captures and steps[finite_col] not in captures
    canvas = matrix.locator("canvas")
    box = canvas.bounding_box()
    x0, x1 = steps[0], h["last_steps"][-1] + 1
    for col, expected in ((finite_col, max(s for s in captures if s <= steps[finite_col])),
                          (nan_col, min(s for s in captures if s >= NAN_STEP))):
        page.mouse.click(box["x"] + (steps[col] + 0.5 - x0) / (x1 - x0) * box["width"], box["y"] + 14 * row + 7)
        expect(frame.locator('[data-view="layer"]')).to_be_visible()
        state = app_state(page)
        assert (state["layer"], state["step"]) == ("second", expected), (steps[col], state)
        frame.locator('[data-action="health-view"]').click()
        expect(matrix).to_have_count(1, timeout=30_000)
        box = canvas.bounding_box()


def test_compared_runs_stack_on_one_step_axis_and_the_picker_changes_the_statistic(tensorboard_url, page):
    frame = open_tab(page, tensorboard_url, f"&p.xray.run={HEALTH_NAN},{HEALTH_DEAD}&p.xray.view=health")
    view = frame.locator('[data-view="health"]')
    matrices = view.locator(f'{MATRIX}[data-state="ready"]')
    expect(matrices).to_have_count(2)
    assert [matrices.nth(i).get_attribute("data-run") for i in range(2)] == [HEALTH_NAN, HEALTH_DEAD]
    assert {matrices.nth(i).get_attribute("data-stat") for i in range(2)} == {"grad_l2"}  # stat || 'grad_l2'
    assert matrices.nth(0).get_attribute("data-columns") == matrices.nth(1).get_attribute("data-columns")
    widths = [matrices.nth(i).locator("canvas").bounding_box() for i in range(2)]
    assert widths[0]["x"] == widths[1]["x"] and widths[0]["width"] == widths[1]["width"]
    # Each matrix holds its run's values as the server gives them for the same columns (the iterations
    # health measures under every="auto" depend on timing, so the NaN's cell is not asserted here).
    for i, run in enumerate([HEALTH_NAN, HEALTH_DEAD]):
        h = health(tensorboard_url, run, "grad_l2", matrices.nth(i).get_attribute("data-columns"))
        assert [int(s) for s in matrices.nth(i).get_attribute("data-steps").split(",")] == h["steps"]
        for layer in h["layers"]:
            drawn = drawn_values(matrices.nth(i).locator(f'[data-layer="{layer}"]').get_attribute("data-values"))
            assert same(drawn, server_row(h, layer)), (run, layer)
    # Both runs' findings are listed.
    expect(frame.locator(f'[data-finding][data-run="{HEALTH_DEAD}"][data-rule="dead_units"]')).to_have_count(1)

    picker = frame.locator('select[data-action="health-stat"]')
    expect(picker.locator('option[value="update_ratio"]')).to_have_count(1)
    picker.select_option("update_ratio")
    expect(view.locator(f'{MATRIX}[data-stat="update_ratio"]')).to_have_count(2)
    assert app_state(page)["stat"] == "update_ratio"
    # The same picker is shown in the graph view, with "no colours".
    view.locator('[data-action="back-to-graph"]').click()
    expect(frame.locator('[data-view="graph"]')).to_be_visible()
    expect(picker).to_be_visible()
    expect(picker.locator('option[value=""]')).to_have_count(1)
    picker.select_option("")
    assert app_state(page)["stat"] is None
    assert [e for e in page.xray_errors if e.startswith("uncaught")] == []


def test_a_matrix_of_50_layers_and_800_columns_draws_in_a_few_ms(tensorboard_url, page):
    open_tab(page, tensorboard_url)
    ms = plugin_frame(page).evaluate("""async () => {
      const d = await import(new URL('static/health_draw.js', document.baseURI).href);
      const { healthScale } = await import(new URL('static/health_scale.js', document.baseURI).href);
      const rows = 50, cols = 800, values = new Float32Array(rows * cols), present = new Uint8Array(rows * cols).fill(1);
      for (let i = 0; i < values.length; i++) values[i] = Math.exp(Math.sin(i) * 5);
      const m = { layers: Array.from({length: rows}, (_, i) => 'l' + i), steps: Array.from({length: cols}, (_, i) => i * 10),
                  lastSteps: Array.from({length: cols}, (_, i) => i * 10 + 9), values, present };
      const canvas = document.createElement('canvas');
      const scale = healthScale('grad_l2', [m]);
      const times = [];
      for (let k = 0; k < 7; k++) {
        const t = performance.now();
        d.drawMatrix(canvas, m, scale, { cssWidth: 800 / (window.devicePixelRatio || 1), rowHeight: 14, x0: 0, x1: 8000 });
        times.push(performance.now() - t);
      }
      times.sort((a, b) => a - b);
      return times[3];
    }""")
    assert ms < 25, f"drawing took {ms:.1f} ms"
