"""Frames drawn with matplotlib, for notebooks and reports (``pip install 'xray-tb[notebook]'``).

Frames are ``(FrameHeader, values)`` pairs, as the recorder stores them. matplotlib is imported
only when something is drawn.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Optional

import numpy as np

from tb_plugin import layout
from tb_plugin.metadata import KINDS, FrameHeader
from xray_tb.numeric import is_number

Frame = tuple[FrameHeader, np.ndarray]

_CELL_INCHES = (3.4, 3.0)  # width, height of one layer/kind cell
_GAP_COLOUR = "0.8"  # between panels, and where a value is NaN or infinite
_MAX_PIXELS = 400  # the longest side of a cell's image before its panels are pooled (a cell is ~340 px at 100 dpi)


def show_frames(frames: Sequence[Frame], *, save: Optional[str | os.PathLike] = None, title: Optional[str] = None):
    """Draw the frames of one capture: one row per layer, one column per kind.

    Each cell tiles the frame's panels (one per kept filter) with its own colour bar: a diverging
    map centred on zero for signed values, viridis otherwise. NaN and Inf are left blank and
    counted in the cell's title.

    Args:
        frames: ``(FrameHeader, values)`` pairs, at most one per layer and kind.
        save: a file to write the figure to (PNG unless the name says otherwise); the figure is
            then closed.
        title: a title over the whole figure.

    Returns:
        The ``matplotlib.figure.Figure``; a notebook shows it inline when it is a cell's value.

    Raises:
        ValueError: no frames, or two of one layer and kind.
    """
    if save is not None:
        _writable(save, "save")
    plt = _pyplot()
    cells = _cells(frames)
    layers = list(dict.fromkeys(layer for layer, _ in cells))
    kinds = [kind for kind in KINDS if any(key[1] == kind for key in cells)]
    figure = plt.figure(figsize=(_CELL_INCHES[0] * len(kinds), _CELL_INCHES[1] * len(layers)), layout="constrained")
    axes = figure.subplots(len(layers), len(kinds), squeeze=False)
    for row, layer in enumerate(layers):
        for column, kind in enumerate(kinds):
            frame = cells.get((layer, kind))
            if frame is None:
                axes[row, column].set_axis_off()
            else:
                _draw_cell(figure, axes[row, column], *frame)
    if title:
        figure.suptitle(title)
    if save is not None:
        figure.savefig(save)
    if save is not None or "inline" in plt.get_backend():
        plt.close(figure)  # in a notebook the returned figure displays once, not also as an open pyplot figure
    return figure


def save_gif(frames: Sequence[Frame], path: str | os.PathLike, *, fps: float = 2) -> str | os.PathLike:
    """Write an animated GIF of one layer and kind over the steps of ``frames``.

    All frames share one colour scale, so colours compare across steps.

    Args:
        frames: ``(FrameHeader, values)`` pairs of one layer and kind, drawn in step order.
        path: the GIF file to write.
        fps: frames per second.

    Returns:
        ``path``.

    Raises:
        ValueError: no frames, or frames of more than one layer and kind.
    """
    _writable(path, "path")
    if not is_number(fps) or not 0 < fps <= 100:
        raise ValueError(f"fps= is the GIF's frames per second, a number in (0, 100]; got {fps!r}")
    plt = _pyplot()
    from matplotlib.animation import PillowWriter

    ordered = sorted(_checked(frames), key=lambda frame: frame[0].step)
    series = {(header.layer, header.kind) for header, _ in ordered}
    if len(series) > 1:
        found = ", ".join(sorted(f"{layer} · {kind}" for layer, kind in series))
        raise ValueError(f"save_gif draws one layer and kind; got {found}")
    panels = [layout.to_panels(values) for _, values in ordered]
    cmap, low, high = _colour_scale([panel for frame_panels in panels for panel in frame_panels])
    figure = plt.figure(figsize=(5, 4.5), layout="constrained")
    try:
        axes = figure.add_subplot()
        image = _image(axes, panels[0], ordered[0][1], cmap, low, high)
        figure.colorbar(image, ax=axes, shrink=0.8)
        writer = PillowWriter(fps=fps)
        with writer.saving(figure, os.fspath(path), dpi=100):
            for (header, values), frame_panels in zip(ordered, panels, strict=True):
                image.set_data(np.ma.masked_invalid(_mosaic(frame_panels)))
                axes.set_title(_title(header, values, frame_panels), fontsize=9)
                writer.grab_frame()
    finally:
        plt.close(figure)
    return path


def _writable(path: object, name: str) -> None:
    """Refuse, before anything is drawn, a ``path`` that is no file path or whose folder does not exist."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name}= is the file to write, a str or path such as 'step.png'; got {type(path).__name__} {path!r}")
    folder = os.path.dirname(os.fspath(path)) or "."
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{name}={os.fspath(path)!r}: the folder {folder!r} does not exist; create it first")


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("xray_tb.notebook.views needs matplotlib: pip install 'xray-tb[notebook]'") from None
    return plt


def _checked(frames: Sequence[Frame]) -> list[Frame]:
    """``frames`` as a list of ``(FrameHeader, ndarray)``; a clear error for anything else."""
    frames = list(frames)
    if not frames:
        raise ValueError("no frames to draw")
    for frame in frames:
        if not (isinstance(frame, tuple) and len(frame) == 2 and isinstance(frame[0], FrameHeader)):
            raise TypeError(f"frames are (FrameHeader, values) pairs; got {_type_names(frame)}")
    return [(header, np.asarray(values)) for header, values in frames]


def _type_names(frame: object) -> str:
    """``tuple of (Tensor, FrameHeader)``, or the type's name for anything but a tuple."""
    if not isinstance(frame, tuple):
        return type(frame).__name__
    return f"tuple of ({', '.join(type(item).__name__ for item in frame)})"


def _cells(frames: Sequence[Frame]) -> dict[tuple[str, str], Frame]:
    """``{(layer, kind): frame}``; a ValueError when a layer and kind come twice."""
    cells: dict[tuple[str, str], Frame] = {}
    for header, values in _checked(frames):
        key = (header.layer, header.kind)
        if key in cells:
            steps = f"steps {cells[key][0].step} and {header.step}"
            raise ValueError(f"two frames of {header.layer} · {header.kind} ({steps}); show_frames draws one capture")
        cells[key] = (header, values)
    return cells


def _draw_cell(figure, axes, header: FrameHeader, values: np.ndarray) -> None:
    panels = layout.to_panels(values)
    image = _image(axes, _pooled(panels, square=values.ndim >= 3), values, *_colour_scale(panels))
    axes.set_title(_title(header, values, panels), fontsize=8)
    figure.colorbar(image, ax=axes, shrink=0.8)


def _image(axes, panels: list[np.ndarray], values: np.ndarray, cmap: str, low: float, high: float):
    """An ``imshow`` of the tiled panels, blank where there is no finite value."""
    import matplotlib

    colours = matplotlib.colormaps[cmap].with_extremes(bad=_GAP_COLOUR)
    aspect = "equal" if values.ndim >= 3 else "auto"  # square feature maps; a matrix fills its cell
    image = axes.imshow(
        np.ma.masked_invalid(_mosaic(panels)), cmap=colours, vmin=low, vmax=high, aspect=aspect, interpolation="nearest"
    )
    axes.set_xticks([])
    axes.set_yticks([])
    return image


def _pooled(panels: list[np.ndarray], square: bool) -> list[np.ndarray]:
    """The panels pooled (max-abs, as the tab) so that their mosaic is at most :data:`_MAX_PIXELS` on a
    side: a cell a few inches wide would otherwise drop most columns of a 64×3072 activation. Feature
    maps (``square``) are pooled alike in both directions."""
    height, width = _mosaic_shape(panels)
    ky, kx = -(-height // _MAX_PIXELS), -(-width // _MAX_PIXELS)
    if square:
        ky = kx = max(ky, kx)
    return panels if ky <= 1 and kx <= 1 else [layout.pool_panel(panel, ky, kx) for panel in panels]


def _mosaic_shape(panels: list[np.ndarray]) -> tuple[int, int]:
    rows, cols = panels[0].shape
    grid_cols = min(len(panels), max(1, round(math.sqrt(len(panels) * rows / cols))))
    grid_rows = math.ceil(len(panels) / grid_cols)
    return grid_rows * (rows + 1) - 1, grid_cols * (cols + 1) - 1


def _mosaic(panels: list[np.ndarray]) -> np.ndarray:
    """The panels (all of one shape) tiled into a near-square grid, one NaN pixel between them."""
    rows, cols = panels[0].shape
    grid_cols = min(len(panels), max(1, round(math.sqrt(len(panels) * rows / cols))))
    mosaic = np.full(_mosaic_shape(panels), np.nan, dtype=np.float32)
    for i, panel in enumerate(panels):
        top, left = (i // grid_cols) * (rows + 1), (i % grid_cols) * (cols + 1)
        mosaic[top: top + rows, left: left + cols] = panel
    return mosaic


def _colour_scale(panels: list[np.ndarray]) -> tuple[str, float, float]:
    """``(colour map, vmin, vmax)``: symmetric RdBu_r for signed values, viridis otherwise."""
    low, high, _ = layout.finite_range(panels)
    if low is None:
        return "viridis", 0.0, 1.0
    if low < 0 < high:
        bound = max(-low, high)
        return "RdBu_r", -bound, bound
    return "viridis", low, high


def _title(header: FrameHeader, values: np.ndarray, panels: list[np.ndarray]) -> str:
    """``conv1 · output  step 20`` over ``[32, 6, 8, 8] → 6 filters``, with any non-finite count."""
    noun = "filters" if values.ndim >= 3 else "rows" if values.ndim == 2 else "values"
    title = f"{header.layer} · {header.kind}  step {header.step}\n"
    title += f"{header.original_shape} → {len(header.indices)} {noun}"
    nonfinite = layout.finite_range(panels)[2]
    return f"{title}  ({nonfinite} non-finite)" if nonfinite else title
