"""Animated GIFs of one layer and kind over the timeline (route ``/gif``), drawn with Pillow.

Pillow is a dependency of TensorBoard itself, so this works in any TensorBoard environment: no
matplotlib, no torch. Colours are the tab's (:mod:`tb_plugin.colormaps`), on one scale over all
frames, fixed like the tab's timeline scale: diverging about zero when the values cross it, else
sequential. Each frame shows the frame's panels tiled (:func:`tb_plugin.layout.to_panels`), a title
with the layer, kind and step, and the colour bar with its two ends.

A GIF holds 256 colours: the background, NaN, Inf and 253 of the scale's 255 entries. The two
entries next to each end take their outer neighbour's colour (a step of a few units in RGB); every
other value, zero of a diverging scale and both ends included, has exactly the tab's colour.
"""

from __future__ import annotations

import io
import math
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from tb_plugin import colormaps, layout, metadata

BACKGROUND = (255, 255, 255)
_BACKGROUND_CODE = colormaps.INF_CODE + 1
_DROPPED = (1, colormaps.LUT_SIZE - 2)  # entries that take their outer neighbour's palette slot
_PAD, _BAR_HEIGHT, _MIN_WIDTH, _TARGET = 6, 10, 256, 256


_KEPT = np.asarray([code for code in range(_BACKGROUND_CODE) if code not in _DROPPED])  # slots 1 .. 255


def _slots() -> np.ndarray:
    """Palette slot of every code (LUT entries, NaN, Inf, background)."""
    slots = np.zeros(_BACKGROUND_CODE + 1, dtype=np.uint8)  # the background is slot 0
    slots[_KEPT] = np.arange(1, len(_KEPT) + 1)
    slots[_DROPPED[0]], slots[_DROPPED[1]] = slots[0], slots[colormaps.LUT_SIZE - 1]
    return slots


_SLOTS = _slots()


def _palette(scale: colormaps.Scale) -> list[int]:
    colours = np.zeros((256, 3), dtype=np.uint8)
    colours[0] = BACKGROUND
    colours[_SLOTS[_KEPT]] = scale.table[_KEPT]
    return colours.ravel().tolist()


def draw_gif(frames: Sequence[tuple[metadata.FrameHeader, np.ndarray]], fps: int) -> bytes:
    """GIF bytes of ``frames`` (``(header, values)`` of one layer and kind), one GIF frame each, in order."""
    if not frames:
        raise ValueError("no frames to draw")
    panels = [layout.to_panels(values) for _, values in frames]
    low, high, _ = layout.finite_range([panel for frame in panels for panel in frame])
    scale = colormaps.make_scale(low, high)
    palette = _palette(scale)
    images = [_frame_image(header, frame_panels, scale, palette) for (header, _), frame_panels in zip(frames, panels)]
    size = (max(image.width for image in images), max(image.height for image in images))
    images = [_padded(image, size, palette) for image in images]
    out = io.BytesIO()
    images[0].save(out, format="GIF", save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0, optimize=False)
    return out.getvalue()


def mosaic_codes(panels: list[np.ndarray], scale: colormaps.Scale) -> np.ndarray:
    """The panels' colour codes tiled into a near-square grid, one background pixel between panels."""
    rows, cols = max(p.shape[0] for p in panels), max(p.shape[1] for p in panels)
    across = min(len(panels), max(1, round(math.sqrt(len(panels) * rows / cols))))
    down = math.ceil(len(panels) / across)
    grid = np.full((down * (rows + 1) - 1, across * (cols + 1) - 1), _BACKGROUND_CODE, dtype=np.int16)
    for i, panel in enumerate(panels):
        top, left = divmod(i, across)
        top, left = top * (rows + 1), left * (cols + 1)
        grid[top : top + panel.shape[0], left : left + panel.shape[1]] = colormaps.codes(panel, scale)
    return grid


def _frame_image(header: metadata.FrameHeader, panels: list[np.ndarray], scale: colormaps.Scale, palette: list[int]) -> Image.Image:
    grid = mosaic_codes(panels, scale)
    zoom = max(1, min(16, _TARGET // max(grid.shape)))
    picture = Image.fromarray(_SLOTS[grid], mode="L").resize((grid.shape[1] * zoom, grid.shape[0] * zoom), Image.NEAREST)
    font = ImageFont.load_default()
    line = _text_height(font)
    width = max(picture.width, _MIN_WIDTH) + 2 * _PAD
    top = _PAD + line + _PAD
    bar_top = top + picture.height + _PAD
    image = Image.new("P", (width, bar_top + _BAR_HEIGHT + 2 + line + _PAD), 0)
    image.putpalette(palette)
    image.paste(picture, ((width - picture.width) // 2, top))
    draw = ImageDraw.Draw(image)
    ink = int(_SLOTS[0])  # the scale's darkest colour
    nonfinite = sum(int(np.count_nonzero(~np.isfinite(panel))) for panel in panels)
    title = f"{header.name} · {header.kind}  step {header.step}" + (f"  ({nonfinite} non-finite)" if nonfinite else "")
    draw.text((_PAD, _PAD), _drawable(title), fill=ink, font=font)
    bar = np.round(np.linspace(0, colormaps.LUT_SIZE - 1, width - 2 * _PAD)).astype(int)
    image.paste(Image.fromarray(np.repeat(_SLOTS[bar][None, :], _BAR_HEIGHT, axis=0), mode="L"), (_PAD, bar_top))
    ends = ("no finite values", "") if scale.kind == "empty" else (f"{scale.lo:.4g}", f"{scale.hi:.4g}")
    label_top = bar_top + _BAR_HEIGHT + 2
    draw.text((_PAD, label_top), ends[0], fill=ink, font=font)
    draw.text((width - _PAD - draw.textlength(ends[1], font=font), label_top), ends[1], fill=ink, font=font)
    return image


def _padded(image: Image.Image, size: tuple[int, int], palette: list[int]) -> Image.Image:
    """``image`` on a background of ``size`` (frames of one series can differ in size)."""
    if image.size == size:
        return image
    padded = Image.new("P", size, 0)
    padded.putpalette(palette)
    padded.paste(image, (0, 0))
    return padded


def _text_height(font) -> int:
    left, top, right, bottom = font.getbbox("Ag|")
    return int(bottom) + 1


def _drawable(text: str) -> str:
    """``text`` in characters every Pillow font draws (its bitmap fallback has Latin-1 only)."""
    return text.encode("latin-1", "replace").decode("latin-1")
