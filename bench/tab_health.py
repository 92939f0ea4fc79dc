"""The training-health part of ``bench/bench_tab.py``: a long health run recorded by the real recorder,
and the tab's health measures in Chromium (the matrix opened, the graph recoloured on a step switch,
the first view with findings).

The run: 50 Linear(16, 16) + ReLU layers, ``HealthOptions(every=1)`` for ``iterations`` iterations
(every iteration measured: 50 layers x 20,000 steps by default), a capture every 1,000 steps, and the
bias of 8 of layer ``20``'s 16 units set to -100 before training (planted dead units: a finding).
"""

from __future__ import annotations

import statistics
from pathlib import Path

HEALTH_LAYERS = 50
IFRAME = 'iframe[src*="plugin_entry.html?name=xray"]'
PAINTED = "() => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)))"


def record_health(run_dir: Path, iterations: int) -> int:
    """Trains the 50-layer chain with health on every iteration; returns the number of findings."""
    import torch
    from torch import nn

    from xray_tb import Xray
    from xray_tb.health import HealthOptions

    torch.manual_seed(0)
    blocks = []
    for _ in range(HEALTH_LAYERS):
        blocks += [nn.Linear(16, 16), nn.ReLU()]
    model = nn.Sequential(*blocks)
    with torch.no_grad():
        model[20].bias[:8] = -100.0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with Xray(model, input_size=(16,), logdir=str(run_dir), every=1000, health=HealthOptions(every=1)) as xray:
        for step in range(iterations):
            optimizer.zero_grad()
            model(torch.randn(8, 16)).pow(2).mean().backward()
            xray.take_graphs(step)
            optimizer.step()
        return len(xray.findings())


def arrival_ms(page, frame, condition: str) -> float:
    """ms from the top page's navigation start until ``condition`` holds in the plugin frame."""
    handle = frame.wait_for_function(f"() => ({condition}) ? performance.timeOrigin + performance.now() : false", polling="raf", timeout=60_000)
    return handle.json_value() - page.evaluate("performance.timeOrigin")


def measure_health(page, url: str, run: str, steps_run: str, switches: int) -> dict:
    """The health measures, in ms: ``run`` is the long health run, ``steps_run`` one with many captures."""
    results = {}
    page.goto("about:blank")  # a new document each time: a changed hash alone does not reload the tab
    page.goto(f"{url}/#xray&p.xray.run={run}&p.xray.view=health&p.xray.stat=grad_l2")  # warm the run's read once
    page.frame_locator(IFRAME).locator(f'[data-view=health] [data-run="{run}"][data-steps]').first.wait_for(timeout=60_000)

    page.goto("about:blank")
    page.goto(f"{url}/#xray&p.xray.run={run}")
    frame = page.wait_for_selector(IFRAME).content_frame()
    results["first view with findings: listed"] = arrival_ms(page, frame, "document.querySelector('[data-finding]')")
    results["first view with findings: graph drawn"] = arrival_ms(
        page, frame, "document.querySelector('[data-finding]') && document.querySelector('[data-view=graph][data-state=ready] [data-node-id]')")
    opened = frame.evaluate(
        f"""async (run) => {{
          const painted = {PAINTED};
          const drawn = () => document.querySelector(`[data-view=health]:not([hidden]) [data-run="${{run}}"][data-steps]`);
          const t0 = performance.now();
          document.querySelector('[data-action=health-view]').click();
          while (!drawn()) await new Promise((r) => requestAnimationFrame(r));
          await painted();
          const matrix = drawn();
          return {{ ms: performance.now() - t0, columns: matrix.dataset.steps.split(',').length,
                   rows: matrix.querySelectorAll('[data-values]').length }};
        }}""",
        run,
    )
    results["health matrix opened (click to painted)"] = opened["ms"]

    page.goto("about:blank")
    page.goto(f"{url}/#xray&p.xray.run={steps_run}&p.xray.view=graph&p.xray.stat=grad_l2")
    frame = page.wait_for_selector(IFRAME).content_frame()
    frame.wait_for_selector("[data-view=graph][data-state=ready] [data-value]", timeout=60_000)
    times = frame.evaluate(
        f"""async (n) => {{
          const painted = {PAINTED};
          const app = window.xrayApp;
          const node = () => document.querySelector('[data-view=graph] [data-value]');
          const out = [];
          for (let i = 0; i < n; i++) {{
            const before = node().dataset.value;
            const t0 = performance.now();
            app.timeline.move(i % 50 < 25 ? -1 : 1);
            await new Promise((r) => requestAnimationFrame(r));
            out.push(performance.now() - t0);
            await painted();
          }}
          return out;
        }}""",
        switches,
    )
    times.sort()
    results["graph recoloured on a step switch (median)"] = statistics.median(times)
    results["graph recoloured on a step switch (95th percentile)"] = times[int(0.95 * (len(times) - 1))]
    results["_columns"] = opened["columns"]
    results["_rows"] = opened["rows"]
    return results


#: The bars of issue 17, by measure prefix (ms); 1,310 ms is the first view measured before it.
BARS = {"first view with findings": 1310, "health matrix": 500, "graph recoloured": 50}
