"""The ``device`` fixture of the CUDA tests: a GPU, or the CPU with the device path forced."""

from __future__ import annotations

import pytest
import torch

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
