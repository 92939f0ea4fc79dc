"""Where each flag of a non-finite find sits: one per weight, then one per weight's gradient, one per
bias, one per bias's gradient, each group in its layers' order."""

from __future__ import annotations

from typing import Sequence

from xray_tb.health.nonfinite import FlagRows

#: The kind of value each group of flags stands for, in the groups' order.
KINDS = ("weight", "weight_grad", "bias", "bias_grad")


class FlagLayout:
    """The layers of a find's flags: ``layers`` (one per weight) and ``bias_layers`` (one per bias)."""

    __slots__ = ("layers", "bias_layers", "_forward")

    def __init__(self, layers: Sequence[str], bias_layers: Sequence[str] = ()):
        self.layers = list(layers)
        self.bias_layers = list(bias_layers)
        weights, biases = len(self.layers), len(self.bias_layers)
        #: For each flag, whether it is a weight's or a bias's (read by the forward), not a gradient's.
        self._forward = [i < weights or 2 * weights <= i < 2 * weights + biases for i in range(self.count)]

    @property
    def count(self) -> int:
        """How many flags a find holds."""
        return 2 * (len(self.layers) + len(self.bias_layers))

    @property
    def forward(self) -> list[bool]:
        """For each flag, whether it is a weight's or a bias's (not a gradient's)."""
        return self._forward

    def forward_only(self, flags: Sequence[bool]) -> list[bool]:
        """``flags`` of weights and biases only (those of gradients cleared)."""
        return [flag and forward for flag, forward in zip(flags, self._forward)]

    def has_gradient(self, flags: Sequence[bool]) -> bool:
        """Whether ``flags`` flag any gradient."""
        return any(flag and not forward for flag, forward in zip(flags, self._forward))

    def add_to(self, rows: FlagRows, step: int, flags: Sequence[bool]) -> None:
        """File each flagged value of a find at ``step`` in ``rows``, by kind and layer."""
        count, biases = len(self.layers), len(self.bias_layers)
        groups = zip(KINDS, (self.layers, self.layers, self.bias_layers, self.bias_layers), (0, count, 2 * count, 2 * count + biases))
        for kind, names, offset in groups:
            for i, name in enumerate(names):
                if offset + i < len(flags) and flags[offset + i]:
                    rows.by_step.setdefault(step, {}).setdefault(kind, set()).add(name)
