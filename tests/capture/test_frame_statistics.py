"""Whole-tensor frame statistics against float64 references, on the paths the CPU reduction takes."""

import numpy as np
import pytest
import torch

from xray_tb.capture.frame_statistics import frame_statistics


def reference(tensor: torch.Tensor) -> dict:
    values = tensor.double().reshape(-1)
    return {"mean": float(values.mean()), "std": float(values.std()), "min": float(values.min()), "max": float(values.max())}


@pytest.mark.parametrize("tensor", [
    torch.randn(64, 6, 28, 28, generator=torch.Generator().manual_seed(0)),               # one pass
    torch.relu(torch.randn(300_000, generator=torch.Generator().manual_seed(1))),         # one pass, mean > 0
    torch.randn(50_000, generator=torch.Generator().manual_seed(2)) * 1e-3 + 100.0,       # cancellation: two passes
    torch.tensor([1e38] * 10 + [2e38] * 10),                                              # squares overflow float32
    torch.tensor([3e38, 3e38, -1e38]),                                                    # the float32 sum overflows
    torch.full((7,), 5.0),                                                                # std 0
    torch.randn(9, dtype=torch.float64), torch.randn(9).half(),
], ids=["randn", "relu", "large-mean", "square-overflow", "sum-overflow", "constant", "float64", "float16"])
def test_statistics_equal_float64_reference(tensor):
    (stats,) = frame_statistics([tensor])
    expected = reference(tensor)
    for name, value in expected.items():
        assert stats[name] == pytest.approx(value, rel=2e-6, abs=1e-12 * max(1.0, abs(value))), name
    assert stats["nonfinite"] == 0


def test_nonfinite_values_are_counted_and_make_the_statistics_nan():
    tensor = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 2.0])
    (stats,) = frame_statistics([tensor])
    assert stats["nonfinite"] == 3 and np.isnan(stats["mean"]) and np.isnan(stats["std"])


def test_infinities_of_both_signs_warn_nothing():
    """+inf and -inf add up to NaN inside numpy: the frame says so by its counts, not by a RuntimeWarning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (stats,) = frame_statistics([torch.tensor([1.0, float("inf"), -float("inf"), 2.0])])
    assert stats["nonfinite"] == 2 and np.isnan(stats["mean"]) and stats["min"] == -np.inf and stats["max"] == np.inf
