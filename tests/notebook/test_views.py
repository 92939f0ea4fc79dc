"""show_frames and save_gif draw real frames into real images."""

from __future__ import annotations

import importlib.util
import sys

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib import pyplot as plt
from PIL import Image, ImageSequence
from torch import nn
from torch.nn import functional as F

from tb_plugin.metadata import FrameHeader
from xray_tb import Xray
from xray_tb.notebook import views
from xray_tb.io.reader import open_run
from xray_tb.notebook.views import save_gif, show_frames

matplotlib.use("Agg")

STEPS = [0, 1, 2]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A recorded run of a small conv net: weights, outputs and gradients at three SGD steps."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    x, y = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 0])
    logdir = tmp_path_factory.mktemp("run")
    plan = {"0": {"weight": True, "output": True, "grad": True}, "3": {"weight": True, "weight_grad": True, "bias": True}}
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    with Xray(model, x, logdir=str(logdir), plan=plan) as xray:
        for step in STEPS:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs(step)
            optimizer.step()
    return open_run(logdir)


@pytest.fixture(autouse=True)
def no_figures_left_open():
    yield
    left_open = plt.get_fignums()
    plt.close("all")
    assert left_open == [], "a function left a pyplot figure open"


def capture(run, step: int) -> list[tuple[FrameHeader, np.ndarray]]:
    frames = []
    for layer, kinds in run.records().items():
        for kind in kinds:
            values, header = run.load(layer, kind, step)
            frames.append((header, values.numpy()))
    return frames


def header(step: int = 0, layer: str = "conv", kind: str = "output") -> FrameHeader:
    return FrameHeader("run", layer, kind, step, 0.0, [1, 2, 3, 3], "float32", 1, [0, 1], 0, "KeepAll()")


def colours(path) -> int:
    return len(Image.open(path).convert("RGB").getcolors(maxcolors=1 << 20))


def test_show_frames_draws_every_layer_and_kind(run, tmp_path):
    png = tmp_path / "capture.png"
    figure = show_frames(capture(run, 2), save=png, title="step 2")
    assert colours(png) > 50  # heat maps, not a blank canvas
    titles = [axes.get_title() for axes in figure.axes if axes.get_title()]
    assert titles[0] == "0 · weight  step 2\n[4, 1, 3, 3] → 4 filters"
    assert "3 · weight_grad  step 2\n[3, 144] → 3 rows" in titles
    assert "3 · bias  step 2\n[3] → 3 values" in titles
    assert len(titles) == 6  # 2 layers x 5 kinds, 4 cells empty


def test_show_frames_without_save_returns_an_open_figure(run):
    figure = show_frames(capture(run, 0))
    assert plt.fignum_exists(figure.number)
    plt.close(figure)


def test_signed_values_use_a_diverging_map_centred_on_zero():
    signed_values = np.array([[[-1.0, 0, 3]] * 3] * 2, dtype=np.float32)
    figure = show_frames([(header(), signed_values), (header(kind="grad"), np.ones((2, 3, 3)))])
    signed, positive = (axes.images[0] for axes in figure.axes if axes.images)
    assert signed.cmap.name.startswith("RdBu_r") and signed.get_clim() == (-3.0, 3.0)
    assert positive.cmap.name.startswith("viridis")
    plt.close(figure)


def test_nan_and_inf_are_blank_and_counted(tmp_path):
    values = np.arange(18, dtype=np.float32).reshape(2, 3, 3) - 9
    values[0, 0, 0], values[1, 2, 2] = np.nan, np.inf
    nothing_finite = np.full((2, 3, 3), np.nan, dtype=np.float32)
    frames = [(header(), values), (header(kind="grad"), nothing_finite)]
    figure = show_frames(frames, save=tmp_path / "nan.png")
    assert figure.axes[0].get_title().endswith("(2 non-finite)")
    assert colours(tmp_path / "nan.png") > 10
    save_gif([(header(), values), (header(1), nothing_finite)], tmp_path / "nan.gif")


def test_save_gif_animates_the_steps_on_one_colour_scale(run, tmp_path):
    path = save_gif([(h, v.numpy()) for v, h in run.frames("0", "weight")], tmp_path / "weights.gif", fps=4)
    with Image.open(path) as gif:
        images = [np.asarray(image.convert("RGB")) for image in ImageSequence.Iterator(gif)]
        assert len(images) == 3 and gif.info["duration"] == 250
    assert not np.array_equal(images[0], images[-1])


def test_save_gif_colours_compare_across_steps(tmp_path):
    pattern = np.linspace(-1, 1, 18, dtype=np.float32).reshape(2, 3, 3)
    path = save_gif([(header(step), pattern * 10 ** step) for step in STEPS], tmp_path / "growing.gif")
    with Image.open(path) as gif:
        first, _, last = (np.asarray(image.convert("RGB"), dtype=int) for image in ImageSequence.Iterator(gif))
    # Per-frame scales would draw the same picture three times; one scale makes step 0 nearly white.
    assert (np.abs(first - last).sum(axis=2) > 60).mean() > 0.05


def test_bad_input_is_refused(run):
    with pytest.raises(ValueError, match="no frames"):
        show_frames([])
    with pytest.raises(ValueError, match="no frames"):
        save_gif([], "unused.gif")
    with pytest.raises(ValueError, match="save_gif draws one layer and kind; got conv · grad, conv · output"):
        save_gif([(header(), np.ones((2, 3, 3))), (header(kind="grad"), np.ones((2, 3, 3)))], "unused.gif")
    with pytest.raises(ValueError, match=r"two frames of conv · output \(steps 0 and 1\)"):
        show_frames([(header(0), np.ones((2, 3, 3))), (header(1), np.ones((2, 3, 3)))])
    values, loaded = run.load("0", "weight", 0)
    with pytest.raises(TypeError, match=r"\(FrameHeader, values\) pairs; got tuple of \(Tensor, FrameHeader\)"):
        show_frames([(values, loaded)])
    frames = [(h, v.numpy()) for v, h in run.frames("0", "weight")]
    with pytest.raises(FileNotFoundError, match=r"save='/no/such/folder/step.png': the folder '/no/such/folder' does not exist"):
        show_frames(frames[:1], save="/no/such/folder/step.png")  # refused before it draws
    with pytest.raises(TypeError, match=r"save= is the file to write, a str or path .*; got int 3"):
        show_frames(frames[:1], save=3)
    for fps in (0, "4", -2.5):
        with pytest.raises(ValueError, match=rf"fps= is the GIF's frames per second, a number in \(0, 100\]; got {fps!r}"):
            save_gif(frames, "unused.gif", fps=fps)
    with pytest.raises(FileNotFoundError, match=r"path='/no/such/folder/w.gif'"):
        save_gif(frames, "/no/such/folder/w.gif")


def test_views_import_without_matplotlib_and_say_how_to_install_it(monkeypatch):
    for name in ("matplotlib", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it now raises ImportError
    spec = importlib.util.spec_from_file_location("views_without_matplotlib", views.__file__)
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    with pytest.raises(ImportError, match=r"pip install 'xray-tb\[notebook\]'"):
        fresh.show_frames([(header(), np.ones((2, 3, 3)))])


def test_a_wide_activation_is_pooled_as_the_tab_pools_it_keeping_its_outlier():
    """A 64×3072 activation in a cell a few inches wide: pooled max-abs to at most 400 columns, so the
    one large value is still drawn (plain subsampling would drop 7 columns in 8)."""
    values = np.random.default_rng(0).uniform(-1, 1, (64, 3072)).astype(np.float32)
    values[10, 1003] = -50.0
    figure = show_frames([(header(kind="activation"), values)])
    image = next(axes.images[0] for axes in figure.axes if axes.images).get_array()
    assert image.shape == (64, 384) and image.min() == -50.0
    plt.close(figure)


def test_pool_panel_keeps_the_largest_magnitude_with_its_sign_and_nan():
    from tb_plugin.layout import pool_panel

    panel = np.array([[1, -3, 2, 0], [0.5, 1, np.nan, 1], [np.inf, 0, 1, 1]], dtype=np.float32)
    np.testing.assert_array_equal(pool_panel(panel, 2, 2), np.array([[-3, np.nan], [np.inf, 1]], dtype=np.float32))
