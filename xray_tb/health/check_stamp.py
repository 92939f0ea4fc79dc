"""Whether the tensors the sentinel checked are untouched since: the check again before an optimizer
step (after a ``take_graphs()`` call that counted the iteration) then reads nothing, on a CPU or an
accelerator alike. Version counters, data pointers and identities only: host-side, no device sync, and
compared with C-level maps, none per tensor in Python (this runs right after a backward, when Python
is slow, and a GPU's host must do no more Python per layer)."""

from __future__ import annotations

import operator
import weakref
from typing import Optional

import torch

_VERSION = operator.attrgetter("_version")
_LAYOUT = operator.attrgetter("layout")
_STRIDED = frozenset({torch.strided})
_dereference = weakref.ref.__call__


class CheckStamp:
    """What one check saw, noted once rechecks are known to come (so a loop without them pays nothing)."""

    def __init__(self) -> None:
        self._rechecked = False  # a recheck came: each check is noted for the next one
        self._noted: Optional[tuple] = None  # (fixed tensors, None pattern, weak references to the others, stamp)

    @property
    def armed(self) -> bool:
        """Whether a recheck came: from then on each check is noted (:meth:`note`)."""
        return self._rechecked

    def note(self, fixed: list[torch.Tensor], varying: list[Optional[torch.Tensor]]) -> None:
        """A check just read ``fixed`` (the same list object at each check: the weights) and ``varying``
        (gradients, None where missing)."""
        present = [tensor for tensor in varying if tensor is not None]
        stamp = _stamp(fixed, present)
        if stamp is None or not {*map(_LAYOUT, present)} <= _STRIDED:
            self._noted = None  # a sparse gradient or an inference tensor: read again at every recheck
        else:
            self._noted = (fixed, [tensor is None for tensor in varying], list(map(weakref.ref, present)), stamp)

    def unchanged(self, fixed: list[torch.Tensor], varying: list[Optional[torch.Tensor]]) -> bool:
        """At a recheck: whether ``fixed`` and ``varying`` are what the last noted check read, none of them
        written or replaced since (an answer once: the next recheck needs a check noted again)."""
        self._rechecked = True
        noted, self._noted = self._noted, None
        if noted is None or noted[0] is not fixed or [tensor is None for tensor in varying] != noted[1]:
            return False
        present = [tensor for tensor in varying if tensor is not None]
        return all(map(operator.is_, map(_dereference, noted[2]), present)) and _stamp(fixed, present) == noted[3]


def _stamp(fixed: list[torch.Tensor], present: list[torch.Tensor]) -> Optional[tuple[list, list]]:
    """Every tensor's version counter and where its data lies (``weight.data = ...`` bumps no version);
    None where one has neither (an inference tensor, a tensor subclass without storage)."""
    try:
        return ([*map(_VERSION, fixed), *map(_VERSION, present)],
                [*map(torch.Tensor.data_ptr, fixed), *map(torch.Tensor.data_ptr, present)])
    except RuntimeError:
        return None
