"""What an :class:`~xray_tb.Xray` gives back: its records, frames from memory or the run's files, the
notebook view, a GIF, the architecture table and Attention-IoU (a mixin, so the facade stays small)."""

from __future__ import annotations

import copy
from typing import Optional

import numpy as np
import torch

from tb_plugin import metadata
from xray_tb.notebook import views
from xray_tb.io.reader import RecordedRun, open_run
from xray_tb.trace.summary_table import summary_table


class ReadBackMixin:
    """Reads what the Xray recorded (``_records``, ``_last_frames``, the run directory)."""

    def records(self) -> dict[str, dict[str, list[int]]]:
        """What this Xray recorded: ``{layer: {kind: [steps]}}``."""
        return copy.deepcopy(self._records)

    def load(self, layer: str, kind: str, step: int) -> tuple[torch.Tensor, metadata.FrameHeader]:
        """A recorded frame (the kept values) and its header: from memory when it is from the last
        capture, else from the run's event files."""
        in_memory = self._last_frames.get((layer, kind))
        if in_memory is not None and in_memory[0].step == int(step):
            header, values = in_memory
            return torch.from_numpy(values.astype(np.float32)), header
        return self._written_run().load(layer, kind, step)

    def _written_run(self) -> RecordedRun:
        """The run as written so far, read incrementally from the event files."""
        if self._resources.sink is not None:
            self._resources.sink.flush()
        if self._run is None:
            self._run = open_run(self._logdir)
        else:
            self._run.reload()
        return self._run

    def show_last_graphs(self, save: Optional[str] = None):
        """Draw the last capture with matplotlib: one row per layer, one panel per kind.

        Inline in Jupyter; with ``save=path``, written to a PNG. Returns the figure.
        """
        if not self._last_frames:
            raise RuntimeError("nothing captured yet: call take_graphs() after loss.backward() first")
        return views.show_frames(list(self._last_frames.values()), save=save, title=f"step {self._last_step}")

    def save_gif(self, layer: str, kind: str, path: str, *, fps: float = 2) -> str:
        """Animate a layer's frames of one kind over the captured steps into a GIF at ``path``."""
        frames = [(header, values.numpy()) for values, header in self._written_run().frames(layer, kind)]
        return views.save_gif(frames, path, fps=fps)

    def summary(self) -> str:
        """A text table of the traced graph: name, type or op, output shape, parameters."""
        return summary_table(self.architecture)

    def attention_iou(self, loader, *, target: int, protected: int, masks=None, **options):
        """Attention-IoU of the model over ``loader``, written into the run at the current step and
        returned as a :class:`xray_tb.bias.BiasReport`; see :func:`xray_tb.bias.recording.attention_iou`."""
        from xray_tb.bias.recording import attention_iou

        return attention_iou(self, loader, target=target, protected=protected, masks=masks, **options)
