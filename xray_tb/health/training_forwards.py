"""Which forwards of the model are training's own: those health's root pre-hooks look at."""

from __future__ import annotations

import threading
from typing import Optional

import torch

from xray_tb.trace.state import leaving_no_trace


class TrainingThread:
    """The thread that trains (the first to run a training forward, or the one that checks) and the test of
    a forward starting on it."""

    __slots__ = ("owner",)

    def __init__(self):
        self.owner: Optional[int] = None

    def claims(self) -> bool:
        """Whether the forward starting now is a training forward on the training thread: grad enabled, not
        validation, not Xray's own (trace, probes, a forward run again), not a checkpoint's recomputation
        in backward."""
        if not torch.is_grad_enabled() or leaving_no_trace() or torch._C._current_autograd_node() is not None:
            return False
        thread = threading.get_ident()
        if self.owner is None:
            self.owner = thread
        return thread == self.owner

    def claim(self) -> None:
        """The calling thread trains (it checks)."""
        self.owner = threading.get_ident()

    def is_owner(self) -> bool:
        """Whether the calling thread is the training thread (or none is known yet)."""
        return self.owner is None or self.owner == threading.get_ident()
