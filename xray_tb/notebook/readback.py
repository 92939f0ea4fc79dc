"""What an :class:`~xray_tb.Xray` gives back: its records, frames read back from the run's files, the
notebook view, a GIF and the architecture table, over the :class:`~xray_tb.recording.Recording`."""

from __future__ import annotations

import array
from typing import Optional

import torch

from tb_plugin import metadata
from xray_tb.io.reader import RecordedRun, open_run
from xray_tb.io.remote_event_file import CLOSE_TIMEOUT
from xray_tb.notebook import views
from xray_tb.recording import Recording
from xray_tb.trace.summary_table import summary_table


class ReadBack:
    """What the recording captured: the steps per layer and kind, and the run's files, read
    incrementally when something is asked for.

    No frame is kept in memory between captures (they can weigh the whole 16 MiB capture budget,
    several percent of a model's size): the last capture's frames are read back from the files,
    after Xray's own writes are flushed."""

    def __init__(self, recording: Recording):
        self.recording = recording
        self.last_step: Optional[int] = None  #: the step of the last capture written whole
        # What was captured, compactly, since a long run captures thousands of times: each capture's step and
        # the index of its set of frames (layer, kind) among the distinct sets seen (most captures write the
        # same frames). A step listed per layer and kind cost 36 bytes each: 9 MB for 1,000 captures of 250 layers.
        self._steps = array.array("q")
        self._frame_sets = array.array("l")
        self._sets: list[tuple[tuple[str, str], ...]] = []
        self._set_index: dict[tuple[tuple[str, str], ...], int] = {}
        self._run: Optional[RecordedRun] = None

    @property
    def _last_keys(self) -> tuple[tuple[str, str], ...]:
        """(layer, kind) of the last capture's frames."""
        return self._sets[self._frame_sets[-1]] if self._frame_sets else ()

    def remember(self, step: int, frames: dict) -> None:
        """Note a capture's frames ``{(layer, kind): (header, values)}`` at ``step``."""
        keys = tuple(frames)
        index = self._set_index.get(keys)
        if index is None:
            index = self._set_index[keys] = len(self._sets)
            self._sets.append(keys)
        self._steps.append(int(step))
        self._frame_sets.append(index)

    def records(self) -> dict[str, dict[str, list[int]]]:
        """What this Xray recorded: ``{layer: {kind: [steps]}}``, each step once, ascending (as the run lists
        them): a step written again (its last write wins in the run) is listed once."""
        records: dict[str, dict[str, list[int]]] = {}
        for capture in sorted(range(len(self._steps)), key=self._steps.__getitem__):
            step = self._steps[capture]
            for name, kind in self._sets[self._frame_sets[capture]]:
                steps = records.setdefault(name, {}).setdefault(kind, [])
                if not steps or steps[-1] != step:
                    steps.append(step)
        return records

    def load(self, layer: str, kind: str, step: int) -> tuple[torch.Tensor, metadata.FrameHeader]:
        """A recorded frame (the kept values) and its header, read from the run's event files."""
        return self.written_run().load(layer, kind, step)

    def written_run(self) -> RecordedRun:
        """The run as written so far, read incrementally from the event files."""
        self.recording.flush(timeout=CLOSE_TIMEOUT)  # a remote run: our own uploads first
        if self._run is None:
            self._run = open_run(self.recording.logdir)
        else:
            self._run.reload()
        return self._run

    def show_last_graphs(self, save: Optional[str] = None):
        """Draw the last capture with matplotlib: one row per layer, one panel per kind.

        Inline in Jupyter; with ``save=path``, written to a PNG. Returns the figure.
        """
        if not self._last_keys or self.last_step is None:
            raise RuntimeError("nothing captured yet: call take_graphs() after loss.backward() first")
        run = self.written_run()
        frames = []
        for layer, kind in self._last_keys:
            values, header = run.load(layer, kind, self.last_step)
            frames.append((header, values.numpy()))
        return views.show_frames(frames, save=save, title=f"step {self.last_step}")

    def save_gif(self, layer: str, kind: str, path: str, *, fps: float = 2) -> str:
        """Animate a layer's frames of one kind over the captured steps into a GIF at ``path``."""
        frames = [(header, values.numpy()) for values, header in self.written_run().frames(layer, kind)]
        return views.save_gif(frames, path, fps=fps)

    def summary(self) -> str:
        """A text table of the traced graph: name, type or op, output shape, parameters."""
        return summary_table(self.recording.architecture)
