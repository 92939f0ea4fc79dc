"""The bias view in headless Chromium against a real TensorBoard: the runs are written by
examples/bias.py (a short planted-bias study: one run trained with the patch always agreeing with
the shape, one without), so the view shows what the example shows."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from playwright.sync_api import expect

from tests.tensorboard_server import tensorboard
from xray_tb import bias

pytestmark = [pytest.mark.browser, pytest.mark.slow]

IFRAME = 'iframe[src*="plugin_entry.html?name=xray"]'
BIASED, FAIR = "rho1.0", "rho0.5"
EVALUATION = "shape vs patch"
EXAMPLE_ARGS = ["--train", "640", "--epochs", "3", "--test", "200", "--every", "5"]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("bias_logdir")
    command = [sys.executable, "examples/bias.py", "--logdir", str(root), *EXAMPLE_ARGS]
    from tests.e2e.runs import REPO, child_env

    done = subprocess.run(command, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Open the tab" in done.stdout
    return root


@pytest.fixture(scope="module")
def reports(logdir):
    return {run: bias.read_reports(logdir / run)[EVALUATION] for run in (BIASED, FAIR)}


@pytest.fixture(scope="module")
def url(logdir, tmp_path_factory):
    with tensorboard(sys.executable, logdir, cwd=tmp_path_factory.mktemp("tb_bias")) as base:
        yield base


def open_tab(page, url, hash_suffix):
    page.goto(f"{url}/#xray{hash_suffix}")
    frame = page.frame_locator(IFRAME)
    expect(frame.locator("#xray-run")).to_be_attached(timeout=30_000)
    return frame


def wait_for_step(frame, run, step):
    """The run's column once it shows ``step`` (the first load of the tab can take a while on a busy machine)."""
    column = frame.locator(f'.xray-bias-run[data-run="{run}"]')
    expect(column).to_have_attribute("data-step", str(step), timeout=45_000)
    return column


def cell(column, score, subgroup="all"):
    return column.locator(f'td[data-score="{score}"][data-subgroup="{subgroup}"]')


def expect_cell(column, report, score_label, subgroup="all"):
    kind, _, region = score_label.partition(": ")
    stats = report.score(kind, region or None).subgroups[subgroup]
    target = cell(column, score_label, subgroup)
    expect(target).to_contain_text(f"{stats.mean:.3f}")
    expect(target).to_contain_text(f"chance {stats.chance:.3f}")
    assert float(target.get_attribute("data-mean")) == pytest.approx(stats.mean, abs=1e-12)
    assert float(target.get_attribute("data-chance")) == pytest.approx(stats.chance, abs=1e-12)
    assert int(target.get_attribute("data-count")) == stats.count


def test_the_table_shows_each_score_beside_its_chance_level(url, page, reports):
    frame = open_tab(page, url, f"&p.xray.run={BIASED}&p.xray.view=bias")
    view = frame.locator('[data-view="bias"]')
    expect(view).to_be_visible(timeout=45_000)
    last = max(reports[BIASED])
    column = wait_for_step(frame, BIASED, last)
    for label in ("mask: patch", "mask: shape", "heatmap"):
        for subgroup in bias.SUBGROUPS:
            expect_cell(column, reports[BIASED][last], label, subgroup)
    expect(column.locator("table th").nth(3)).to_have_text("shape=1, patch=0")
    # The biased model's shape map sits on the patch, far above chance; shown in the accent colour.
    assert float(cell(column, "mask: patch").get_attribute("data-mean")) > 2.5 * float(
        cell(column, "mask: patch").get_attribute("data-chance")
    )
    expect(cell(column, "mask: patch").locator(".xray-bias-above")).to_be_visible()
    # The scores over steps: a line and a dashed chance line per score, the marker at the shown step.
    chart = column.locator(f'svg.xray-bias-chart[data-run="{BIASED}"]')
    expect(chart.locator('path[data-key="mean"]')).to_have_count(3)
    expect(chart.locator('path[data-key="chance"]')).to_have_count(3)
    expect(chart).to_have_attribute("data-step", str(last))
    assert page.xray_errors == []


def test_the_example_maps_are_laid_over_their_images(url, page, reports):
    frame = open_tab(page, url, f"&p.xray.run={BIASED}&p.xray.view=bias")
    column = wait_for_step(frame, BIASED, max(reports[BIASED]))
    examples = reports[BIASED][max(reports[BIASED])].examples
    figures = column.locator(".xray-bias-example-figure")
    expect(figures).to_have_count(len(examples.subgroups))
    assert [figures.nth(i).get_attribute("data-subgroup") for i in range(len(examples.subgroups))] == examples.subgroups
    canvases = column.locator("canvas.xray-bias-example")
    expect(canvases).to_have_count(2 * len(examples.subgroups))
    # The first example's shape map laid over its image: the image itself where the map is 0, the
    # map's colour where it is high.
    first = canvases.first
    expect(first).to_have_attribute("data-map", "shape")
    painted = first.evaluate("c => Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data)")
    painted = np.array(painted, dtype=np.int32).reshape(32, 32, 4)[..., :3]
    image, heat = examples.images[0].astype(np.int32), examples.maps[0, 0]
    assert np.abs(painted - image)[heat < 0.005].max() <= 1
    assert heat.max() == pytest.approx(1.0, abs=1e-3)
    assert np.abs(painted - image)[heat > 0.9].sum(axis=-1).mean() > 30
    assert page.xray_errors == []


def test_the_table_follows_the_timeline_and_the_url(url, page, reports):
    steps = sorted(reports[BIASED])
    frame = open_tab(page, url, f"&p.xray.run={BIASED}&p.xray.view=bias&p.xray.step={steps[0]}")
    column = wait_for_step(frame, BIASED, steps[0])
    expect_cell(column, reports[BIASED][steps[0]], "heatmap")
    column.locator(".xray-bias-run-title").click()
    page.keyboard.press("ArrowRight")
    expect(column).to_have_attribute("data-step", str(steps[1]))
    expect(column.locator("svg.xray-bias-chart")).to_have_attribute("data-step", str(steps[1]))
    expect_cell(column, reports[BIASED][steps[1]], "mask: patch")
    # Polled in the page: time.sleep() here would not let Playwright see the URL change.
    page.wait_for_function("step => location.href.includes(`p.xray.step=${step}`)", arg=steps[1], timeout=10_000)
    assert f"p.xray.step={steps[1]}" in page.url and "p.xray.view=bias" in page.url
    assert page.xray_errors == []


def test_two_runs_side_by_side(url, page, reports):
    frame = open_tab(page, url, f"&p.xray.run={BIASED},{FAIR}&p.xray.view=bias")
    wait_for_step(frame, FAIR, max(reports[FAIR]))
    columns = frame.locator(".xray-bias-run")
    expect(columns).to_have_count(2)
    assert [columns.nth(i).get_attribute("data-run") for i in range(2)] == [BIASED, FAIR]
    for run in (BIASED, FAIR):
        column = frame.locator(f'.xray-bias-run[data-run="{run}"]')
        expect(column).to_have_attribute("data-step", str(max(reports[run])))
        expect_cell(column, reports[run][max(reports[run])], "heatmap")
        expect(column.locator("svg.xray-bias-chart path[data-key='mean']")).to_have_count(3)
    biased = float(cell(frame.locator(f'.xray-bias-run[data-run="{BIASED}"]'), "heatmap").get_attribute("data-mean"))
    fair = float(cell(frame.locator(f'.xray-bias-run[data-run="{FAIR}"]'), "heatmap").get_attribute("data-mean"))
    assert biased > fair
    assert page.xray_errors == []


def test_the_sidebar_opens_the_bias_view(url, page):
    frame = open_tab(page, url, f"&p.xray.run={FAIR}")
    frame.locator('[data-action="bias-view"]').click(timeout=45_000)
    expect(frame.locator('[data-view="bias"]')).to_be_visible()
    expect(frame.locator(f'.xray-bias-run[data-run="{FAIR}"] table')).to_be_visible()
    frame.locator('[data-view="bias"] [data-action="back-to-graph"]').click()
    expect(frame.locator('[data-view="bias"]')).to_be_hidden()
    assert page.xray_errors == []


@pytest.fixture(scope="module")
def two_evaluations_url(tmp_path_factory):
    """One run with two evaluations at different steps: "early" at 5, "late" at 100 (an untrained CNN
    on random images and masks: the view's steps, not its numbers, are under test)."""
    import torch
    from torch import nn

    from xray_tb import Xray

    root = tmp_path_factory.mktemp("bias_two_logdir")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
    g = torch.Generator().manual_seed(0)
    images = torch.randn(16, 3, 12, 12, generator=g)
    labels = torch.stack([torch.arange(16) % 2, torch.arange(16) // 2 % 2], 1).float()
    masks = torch.zeros(16, 1, 12, 12)
    masks[:, :, :4, :4] = 1
    with Xray(model, images[:1], logdir=str(root / "two"), health=False) as xray:
        xray.attention_iou([(images, labels, masks)], target=0, protected=1, masks=["patch"], name="early", step=5)
        xray.attention_iou([(images, labels, masks)], target=0, protected=1, masks=["patch"], name="late", step=100)
    with tensorboard(sys.executable, root, cwd=tmp_path_factory.mktemp("tb_bias_two")) as base:
        yield base


def test_choosing_another_evaluation_moves_the_timeline_to_its_steps(two_evaluations_url, page):
    frame = open_tab(page, two_evaluations_url, "&p.xray.run=two&p.xray.view=bias&p.xray.bias=early")
    wait_for_step(frame, "two", 5)
    frame.locator("select[data-action=bias-evaluation]").select_option("late")
    # at once, not at the tab's next 30 s poll; not "not evaluated yet at step 5"
    expect(frame.locator('.xray-bias-run[data-run="two"]')).to_have_attribute("data-step", "100", timeout=10_000)
    expect(frame.locator("#xray-step-label")).to_have_text("step 100", timeout=5_000)
    page.wait_for_function("() => location.href.includes('p.xray.bias=late')", timeout=10_000)
    frame.locator("select[data-action=bias-evaluation]").select_option("early")
    expect(frame.locator('.xray-bias-run[data-run="two"]')).to_have_attribute("data-step", "5", timeout=10_000)
    assert page.xray_errors == []
