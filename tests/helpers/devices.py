"""The CUDA tests' ``device`` fixture (a GPU, or the CPU with the device path forced) and their model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from xray_tb.devices import device_path_on_cpu


@pytest.fixture(params=[pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]),
                        "cpu_device_path"])
def device(request):
    """A device GPU, or the CPU with every reduction on the device path."""
    if request.param == "cuda":
        yield torch.device("cuda")
        return
    with device_path_on_cpu():
        yield torch.device("cpu")


class ConvNet(nn.Module):
    """A conv, then two linear layers, on 1x6x6 images (the CUDA tests' model)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.fc1 = nn.Linear(8 * 36, 64)
        self.fc2 = nn.Linear(64, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(torch.relu(self.conv(x)).flatten(1))))
