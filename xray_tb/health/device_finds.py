"""The sentinel's first find on an accelerator, kept on the device and read once.

Each check hands over a flag per checked tensor (and, from :mod:`xray_tb.health.input_watch`, a flag per
floating input of that iteration's forwards). The flags of the first iteration with a flagged tensor,
and its step, are kept on the device with a few in-place ops and no host sync; they are read when the
statistics are next written. An input's flag never makes a find on its own: a NaN in a batch that the
model masks away leaves the weights and gradients finite, and the first non-finite weight or gradient
is still to be found.
"""

from __future__ import annotations

from typing import Optional

import torch

#: ``(positions of the checked tensors, count of all)`` and the inputs' positions (None: none watched).
Layout = tuple[tuple[list[int], int], Optional[tuple[int, ...]]]
#: A forward's floating inputs: their positions among its tensors (``()``: they changed within the
#: iteration, one flag for all) and one flag each, on the device.
InputFlags = tuple[tuple[int, ...], torch.Tensor]


class DeviceFinds:
    """The flags and step of the first iteration with a flag, on the device (see the module's doc)."""

    def __init__(self):
        self._state: Optional[tuple[torch.Tensor, torch.Tensor, torch.Tensor, Optional[torch.Tensor]]] = None  # seen, step, flags, inputs'
        self._layout: Optional[Layout] = None

    def merge(self, step: int, flags: torch.Tensor, positions: list[int], count: int,
              inputs: Optional[InputFlags] = None) -> Optional[tuple[int, list[bool], Optional[tuple]]]:
        """Keep ``flags`` (and ``inputs``' flags) if they are the first with a flag. A layout other than the
        kept one's reads what was kept first (one sync), returned as :meth:`read` returns it; else None."""
        layout = ((positions, count), None if inputs is None else inputs[0])
        # a check without input flags (no forward of the root since the last) keeps the layout: none are set
        if self._state is None or self._layout[0] != layout[0] or (inputs is not None and self._layout[1] != layout[1]):
            earlier = self.read()  # what an earlier layout found stays found
            if earlier is not None:
                return earlier
            device = flags.device
            watched = None if inputs is None else torch.zeros(len(inputs[1]), dtype=torch.bool, device=device)
            self._state = (torch.zeros((), dtype=torch.bool, device=device), torch.full((), -1, dtype=torch.int64, device=device),
                           torch.zeros(len(positions), dtype=torch.bool, device=device), watched)
            self._layout = layout
        seen, first_step, first_flags, first_inputs = self._state
        new = flags.any() & ~seen  # the flags stay all False until the first iteration with one
        first_flags.logical_or_(flags & new)
        if first_inputs is not None and inputs is not None:
            first_inputs.logical_or_(inputs[1] & new)
        first_step.masked_fill_(new, int(step))
        seen.logical_or_(new)
        return None

    def read(self) -> Optional[tuple[int, list[bool], Optional[tuple]]]:
        """``(step, flags by position among all, inputs)`` of the first find, where ``inputs`` is
        ``(positions, flags)`` of the floating inputs when one was flagged (else None); None when nothing
        was found. One sync; what was kept is dropped."""
        if self._state is None:
            return None
        (seen, first_step, first_flags, first_inputs), ((positions, count), input_positions) = self._state, self._layout
        self._state = self._layout = None
        if not bool(seen):
            return None
        flags = [False] * count
        for position, flag in zip(positions, first_flags.tolist()):
            flags[position] = flag
        inputs = None
        if first_inputs is not None and bool(first_inputs.any()):
            inputs = (input_positions, first_inputs.tolist())
        return int(first_step), flags, inputs

    def shift(self, delta: int) -> None:
        """File the kept find ``delta`` steps later."""
        if self._state is not None:
            first_step = self._state[1]
            first_step.add_((first_step >= 0).long() * delta)
