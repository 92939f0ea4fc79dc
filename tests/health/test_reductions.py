"""The batched reductions (one multi-tensor call per device and dtype) against plain per-tensor math."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from xray_tb.health import reductions


def tensors():
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(7, 5, generator=generator), torch.randn(300, generator=generator).double(),
            torch.randn(3, 4, 5, generator=generator), torch.tensor([1.0, math.nan]), torch.tensor([-math.inf, 2.0]),
            torch.randn(11, generator=generator).half()]


def reference(t: torch.Tensor, what: str) -> float:
    v = t.double().numpy().reshape(-1)
    return {"sum": v.sum(), "l1": np.abs(v).sum(), "l2": np.sqrt((v * v).sum()), "absmax": np.abs(v).max()}[what]


def close(got, expected, rtol=1e-3):
    return (math.isnan(got) and math.isnan(expected)) or got == expected or math.isclose(got, expected, rel_tol=rtol)


def test_norms_and_abs_maxima_equal_their_definitions_across_dtypes():
    ts = tensors()
    for what, values in (("l1", reductions.norms(ts, 1)), ("l2", reductions.norms(ts, 2)), ("absmax", reductions.abs_maxima(ts))):
        assert len(values) == len(ts)
        for t, value in zip(ts, values):
            assert close(float(value), float(reference(t, what))), (what, t.dtype)
    stacked = reductions.stacked_norms(ts, math.inf)
    assert stacked.dtype == torch.float32 and [math.isfinite(v) for v in stacked.tolist()] == [True, True, True, False, False, True]


def test_signed_sums_through_the_scratch_chunks_equal_per_tensor_sums(monkeypatch):
    """The GPU path (copy into a scratch of at most CHUNK values, one segment_reduce per chunk; larger
    tensors on their own), run on CPU tensors with a small CHUNK."""
    monkeypatch.setattr(reductions, "CHUNK", 64)
    generator = torch.Generator().manual_seed(1)
    members = [torch.randn(5, 6, generator=generator), torch.randn(40, generator=generator), torch.randn(200, generator=generator),
               torch.randn(3, generator=generator), torch.randn(8, 8, generator=generator), torch.tensor([1.0, math.nan])]
    plan = reductions._ChunkPlan(members)
    assert plan.large == [2] and len(plan.chunks) >= 2 and plan.scratch.numel() <= 64
    assert plan.scratch.untyped_storage().nbytes() == 0  # no memory held between calls
    for _ in range(2):  # the scratch's layout is reused from call to call
        sums = plan.sums(members)
        assert plan.scratch.untyped_storage().nbytes() == 0  # its memory went back after the call
        for t, value in zip(members, sums):
            assert close(float(value), float(reference(t, "sum")), rtol=1e-5)
    assert [float(s) for s in reductions.SignedSums()(members)][:5] == [float(t.sum()) for t in members][:5]


def test_the_device_paths_signed_sums_hold_no_scratch_memory_between_calls(monkeypatch):
    """Issue 20's held-memory goal on a GPU: the scratch's memory is there during a call only (its
    storage resized to 0 after), even when a call fails, and the next call still sums right."""
    from xray_tb.devices import device_path_on_cpu

    members = [torch.randn(300, 4), torch.randn(17), torch.randn(2, 3, 5)]
    sums = reductions.SignedSums()
    with device_path_on_cpu():
        for _ in range(2):
            got = sums(members)
            assert [float(v) for v in got] == pytest.approx([float(t.double().sum()) for t in members], rel=1e-5)
            (plan,) = sums._plans.values()
            assert plan.scratch.numel() == 1200 + 17 + 30 and plan.scratch.untyped_storage().nbytes() == 0
        monkeypatch.setattr(torch, "segment_reduce", lambda *args, **kwargs: (_ for _ in ()).throw(RuntimeError("planted")))
        with pytest.raises(RuntimeError, match="planted"):
            sums(members)
        assert plan.scratch.untyped_storage().nbytes() == 0


def test_half_precision_norms_accumulate_in_float32():
    big = [torch.full((100_000,), 10.0, dtype=torch.float16), torch.full((10,), 2.0, dtype=torch.bfloat16)]
    assert [float(v) for v in reductions.norms(big, 1)] == [1_000_000.0, 20.0]
    assert all(v.dtype == torch.float32 for v in reductions.norms(big, 2))


def test_an_empty_tensor_gives_zero_for_every_reduction():
    # An FSDP rank's shard of a layer with fewer rows than ranks has no rows: 0 combines with the other
    # ranks' values (sums, norms, and absolute maxima by max), where a maximum alone has no identity.
    full, empty = torch.tensor([[3.0, -4.0]]), torch.zeros(0, 2)
    for members in ([empty, full, empty], [empty], [empty.half(), full.half()]):
        expected = [0.0 if t.numel() == 0 else None for t in members]
        for what, values in (("l1", reductions.norms(members, 1)), ("l2", reductions.norms(members, 2)),
                             ("absmax", reductions.norms(members, math.inf)),
                             ("absmax", reductions.abs_maxima(members)),
                             ("absmax", reductions.stacked_norms(members, math.inf).unbind()),
                             ("sum", reductions.SignedSums()(members)),
                             ("sum", reductions._ChunkPlan(members).sums(members))):  # the GPU path, on a CPU
            got = [float(value) for value in values]
            assert got == [float(reference(t, what)) if e is None else e for t, e in zip(members, expected)], what
