"""The marker of :mod:`xray_tb.health.iteration_follower`: a post-accumulate-grad hook on one trainable
weight of the model, which tells that a backward ran, and where the model holds that weight (so that a
parameter replaced under it is noticed)."""

from __future__ import annotations

from typing import Callable, Optional

import torch

from xray_tb.capture.hooks import Hook
from xray_tb.health.optimizer_params import held_ids


class BackwardMarker:
    """A hook calling ``on_backward()`` at each backward that reaches the marked weight, one of ``weights``.

    ``weights`` are in dataflow order (the layers the forward calls first come first), each of the module
    at the same place in ``modules`` (None: where the model holds a weight is not known).
    """

    def __init__(self, weights: list[torch.nn.Parameter], modules: Optional[list[torch.nn.Module]],
                 on_backward: Callable[[], None]):
        self._on_backward = on_backward
        #: The marked weight (None before one is marked).
        self.weight: Optional[torch.nn.Parameter] = None
        self._slot: Optional[tuple[torch.nn.Module, str]] = None  # where the model holds it
        self._handle = None
        self.bind(weights, modules)

    def bind(self, weights: list[torch.nn.Parameter], modules: Optional[list[torch.nn.Module]]) -> None:
        """The model's weights (found again), in dataflow order; the marked weight stays until :meth:`put_on`."""
        self.weights = weights
        self._modules = modules

    def first_trained(self, optimizer: Optional[torch.optim.Optimizer] = None) -> Optional[torch.nn.Parameter]:
        """The first weight that requires grad (and that ``optimizer`` steps, if given)."""
        held = held_ids(optimizer) if optimizer is not None else None
        return next((w for w in self.weights if w.requires_grad and (held is None or id(w) in held)), None)

    def put_on(self, weight: torch.nn.Parameter) -> None:
        """Mark ``weight`` (one of :attr:`weights`) instead of the weight marked so far."""
        self.remove()
        self.weight = weight
        self._slot = self._slot_of(weight)
        on_backward = self._on_backward
        self._handle = weight.register_post_accumulate_grad_hook(Hook(lambda _: on_backward()))

    def frozen(self) -> bool:
        """Whether the marked weight no longer requires grad (fine-tuning froze it)."""
        return self.weight is not None and not self.weight.requires_grad

    def missed(self) -> bool:
        """Whether the marker can no longer see backwards: frozen, or no longer its module's parameter."""
        return self.frozen() or self.stale()

    def stale(self) -> bool:
        """Whether the model holds another parameter where the marked weight was (``load_state_dict(..., assign=True)``)."""
        slot = self._slot
        return slot is not None and slot[0]._parameters.get(slot[1]) is not self.weight

    def forget_slot(self) -> None:
        """Stop watching where the model holds the marked weight (a replacement is reported once)."""
        self._slot = None

    def among_weights(self) -> bool:
        """Whether the marked weight is one of :attr:`weights` (a pruned layer keeps it as ``weight_orig``);
        if so, where the model holds it is looked up again."""
        if not any(weight is self.weight for weight in self.weights):
            return False
        self._slot = self._slot_of(self.weight)
        return True

    def _slot_of(self, weight: torch.nn.Parameter) -> Optional[tuple[torch.nn.Module, str]]:
        """Where the model holds ``weight``: its module and name (None where unknown)."""
        if self._modules is None:
            return None
        module = self._modules[next(i for i, w in enumerate(self.weights) if w is weight)]
        name = next((name for name, param in module._parameters.items() if param is weight), None)
        return None if name is None else (module, name)

    def remove(self) -> None:
        """Remove the hook (idempotent)."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
