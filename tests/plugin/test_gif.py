"""tb_plugin.colormaps (the tab's colour maps in numpy) and tb_plugin.gif (the /gif drawing)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tb_plugin import colormaps, gif, metadata

FRONTEND = Path(__file__).resolve().parents[2] / "frontend"
VALUES = [-3.0, -1.5, -0.01, 0.0, 0.2, 0.5, 1.0, 2.0, 2.999, float("nan"), float("inf"), float("-inf")]


def header(step: int, layer: str = "conv1") -> metadata.FrameHeader:
    return metadata.FrameHeader("run", layer, "weight", step, 0.0, [2, 1, 3, 3], "float32", 0, [0, 1], None, "all")


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run frontend/colormap.js")
@pytest.mark.parametrize("low, high, signed", [(-3.0, 3.0, True), (0.0, 3.0, False), (-0.5, 2.0, False), (1.0, 1.0, False), (None, None, False)])
def test_colours_match_the_tabs_colormap_js(low, high, signed):
    script = (
        f"import {{ makeScale, fillRgba }} from {json.dumps((FRONTEND / 'colormap.js').as_uri())};"
        f"const values = [{', '.join('NaN' if np.isnan(v) else ('Infinity' if v > 0 else '-Infinity') if np.isinf(v) else repr(v) for v in VALUES)}];"
        f"const out = new Uint8ClampedArray(4 * values.length);"
        f"fillRgba(values, makeScale({json.dumps({'min': low, 'max': high, 'signed': signed})}), out);"
        "console.log(JSON.stringify(Array.from(out)));"
    )
    result = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=30, check=True)
    tab = np.asarray(json.loads(result.stdout), dtype=np.uint8).reshape(-1, 4)[:, :3]
    ours = colormaps.rgb(np.asarray(VALUES), colormaps.make_scale(low, high, signed))
    assert ours.tolist() == tab.tolist()


def test_scale_kinds_and_special_colours():
    assert colormaps.make_scale(-1.0, 4.0).kind == "diverging" and colormaps.make_scale(-1.0, 4.0).lo == -4.0
    assert colormaps.make_scale(0.0, 4.0).kind == "sequential"
    assert colormaps.make_scale(None, None).kind == "empty"
    scale = colormaps.make_scale(-2.0, 2.0)
    assert colormaps.rgb(np.asarray([0.0]), scale).tolist() == [[247, 247, 247]]  # zero is the white middle
    assert colormaps.rgb(np.asarray([np.nan, np.inf, -np.inf]), scale).tolist() == [[255, 0, 255], [128, 128, 128], [128, 128, 128]]
    assert len(colormaps.DIVERGING_LUT) == len(colormaps.SEQUENTIAL_LUT) == colormaps.LUT_SIZE


def test_gif_has_a_frame_per_input_and_the_colours_of_one_scale_over_all_frames():
    steps = [0, 10, 20, 30]
    frames = [(header(step), np.full((2, 1, 3, 3), float(step), dtype=np.float32)) for step in steps]
    frames[1][1][1, 0, 2, 2] = np.nan
    frames[2][1][1, 0, 2, 2] = np.inf
    body = gif.draw_gif(frames, fps=5)
    assert body[:6] == b"GIF89a"
    image = Image.open(io.BytesIO(body))
    assert image.n_frames == len(steps)
    scale = colormaps.make_scale(0.0, 30.0)  # one scale over every frame
    for i, (_, values) in enumerate(frames):
        image.seek(i)
        pixels = np.asarray(image.convert("RGB"))
        colours = {tuple(c) for c in pixels.reshape(-1, 3)}
        assert tuple(colormaps.rgb(np.asarray([values[0, 0, 0, 0]]), scale)[0]) in colours
        assert image.info["duration"] == 200
    image.seek(1)
    assert (255, 0, 255) in {tuple(c) for c in np.asarray(image.convert("RGB")).reshape(-1, 3)}  # NaN
    image.seek(2)
    assert (128, 128, 128) in {tuple(c) for c in np.asarray(image.convert("RGB")).reshape(-1, 3)}  # Inf


def test_every_entry_but_two_keeps_the_tabs_colour():
    scale = colormaps.make_scale(0.0, 254.0)
    values = np.arange(255, dtype=np.float32).reshape(1, 255)
    body = gif.draw_gif([(header(0), values), (header(1), values[:, ::-1].copy())], fps=1)
    image = Image.open(io.BytesIO(body)).convert("RGB")
    drawn = {tuple(c) for c in np.asarray(image).reshape(-1, 3)}
    expected = {tuple(c) for c in colormaps.rgb(values, scale)[0]}
    assert expected - drawn == {tuple(scale.lut[1]), tuple(scale.lut[-2])}  # the two next to each end


def test_odd_layer_names_and_frames_without_finite_values_draw():
    frames = [(header(0, layer="ünï/cödé 🙂"), np.full((3,), np.nan, dtype=np.float32))]
    assert Image.open(io.BytesIO(gif.draw_gif(frames, fps=1))).n_frames == 1
    with pytest.raises(ValueError):
        gif.draw_gif([], fps=1)


def test_mosaic_tiles_panels_with_background_between():
    scale = colormaps.make_scale(0.0, 1.0)
    grid = gif.mosaic_codes([np.zeros((2, 2)), np.ones((2, 2)), np.zeros((2, 2)), np.ones((2, 2))], scale)
    assert grid.shape == (5, 5)
    assert (grid[2, :] == grid[0, 2]).all() and grid[0, 0] == 0 and grid[0, 3] == colormaps.LUT_SIZE - 1


def test_gif_of_frames_that_hold_no_values_is_a_json_404(tmp_path):
    """A layer whose first axis is empty (Linear(4, 0)): its weight frames hold no values; /gif says so."""
    import torch
    from torch import nn

    from tests.helpers.plugin_app import get, serve
    from xray_tb import Xray

    model = nn.Sequential(nn.Linear(4, 0), nn.Linear(0, 2))
    with Xray(model, input_size=(4,), logdir=str(tmp_path / "run"), plan={"0": {"weight": True}}, health=False) as xray:
        for step in range(2):
            model(torch.randn(3, 4)).sum().backward()
            xray.take_graphs(step)
        assert xray.records() == {"0": {"weight": [0, 1]}}
    status, body = get(serve(tmp_path), "/gif", run="run", layer="0", kind="weight")
    assert status == 404 and "hold no values" in body["error"], body
