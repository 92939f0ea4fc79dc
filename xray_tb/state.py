"""Snapshots of everything about a model that Xray promises not to change, to restore or compare."""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from torch import nn


@dataclasses.dataclass
class ModelState:
    """Buffers, train/eval mode of every module, and the RNG states (CPU and, if used, CUDA)."""

    buffers: dict[str, torch.Tensor]
    training: dict[str, bool]
    cpu_rng: torch.Tensor
    cuda_rng: Optional[list[torch.Tensor]]

    @classmethod
    def capture(cls, model: nn.Module) -> "ModelState":
        return cls(
            buffers={name: buffer.detach().clone() for name, buffer in model.named_buffers()},
            training={name: module.training for name, module in model.named_modules()},
            cpu_rng=torch.get_rng_state(),
            cuda_rng=torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None,
        )

    def restore(self, model: nn.Module) -> None:
        """Put buffers, modes and RNG back exactly as captured."""
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                if name in self.buffers:
                    buffer.copy_(self.buffers[name])
        for name, module in model.named_modules():
            if name in self.training:
                module.training = self.training[name]
        torch.set_rng_state(self.cpu_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
