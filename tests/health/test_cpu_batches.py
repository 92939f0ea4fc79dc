"""On a CPU, small tensors of one shape are reduced together as the rows of one matrix
(``xray_tb.health.cpu_batches``): every value equals the tensor's own, NaN stays in its own row, and
a row of statistics takes vectors and lists alike."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from xray_tb.health import cpu_batches, reductions
from xray_tb.health.buffer import RowBuffer
from xray_tb.health.stats.base import IterationStatistic, row_of
from tests.health.test_reductions import close, reference

WANTED = ("sum", "l1", "l2", "absmax")
NAN, INF = 7, 12  # positions of two float32 (8, 4) tensors of mixed_tensors()


def mixed_tensors() -> list[torch.Tensor]:
    """Many small same-shape tensors (with a NaN and an Inf among them) interleaved with other dtypes,
    layouts, shapes seen once, a large tensor, an empty one and 0-d ones."""
    g = torch.Generator().manual_seed(3)
    out: list[torch.Tensor] = []
    for i in range(40):
        out.append(torch.randn(8, 4, generator=g))
        if i % 5 == 0:
            out.append(torch.randn(8, 4, generator=g).double())
        if i % 7 == 0:
            out.append(torch.randn(4, 8, generator=g).t())  # (8, 4), not contiguous
        if i % 4 == 0:
            out.append(torch.randn(2, 3, 4, 4, generator=g).to(memory_format=torch.channels_last))
        if i % 9 == 0:
            out.append(torch.randn(6, generator=g).half())
            out.append(torch.randn(6, generator=g).bfloat16())
            out.append(torch.randn((), generator=g))
    out[NAN][2, 1] = math.nan
    out[INF][0, 0] = math.inf
    out.extend([torch.randn(20_000, generator=g), torch.empty(0, 4), torch.randn(5, 5, 5, generator=g)])
    return out


@pytest.mark.parametrize("batch", [cpu_batches.BATCH, 64])
def test_every_statistic_of_a_batched_tensor_equals_its_own(monkeypatch, batch):
    monkeypatch.setattr(cpu_batches, "BATCH", batch)
    monkeypatch.setattr(cpu_batches, "_PLANS", {})
    tensors = mixed_tensors()
    batches, singles = cpu_batches.plan(tensors)
    assert len(batches) >= 4 and all(len(positions) >= cpu_batches.MIN_BATCH for positions in batches)
    assert sorted([i for positions in batches for i in positions] + list(singles)) == list(range(len(tensors)))
    for positions in batches:
        assert len({(tensors[i].shape, tensors[i].dtype) for i in positions}) == 1
        assert len(positions) * tensors[positions[0]].numel() <= max(batch, cpu_batches.MIN_BATCH * tensors[positions[0]].numel())
    values = reductions.Summaries()(tensors, WANTED)
    for name in WANTED:
        assert values[name].dtype == torch.float32 and values[name].shape == (len(tensors),)
        for index, t in enumerate(tensors):
            expected = 0.0 if t.numel() == 0 else float(reference(t, name))
            rtol = 1e-2 if t.dtype in (torch.float16, torch.bfloat16) else 1e-5
            assert close(float(values[name][index]), expected, rtol), (name, index, t.dtype, t.shape)
    assert tensors[NAN].shape == tensors[INF].shape == (8, 4) and tensors[NAN].dtype == tensors[INF].dtype == torch.float32
    assert math.isnan(values["sum"][NAN]) and math.isinf(values["absmax"][INF])
    finite = [i for i in range(len(tensors)) if i not in (NAN, INF)]
    assert torch.isfinite(values["l2"][finite]).all()  # a NaN stays in its own row of the batch


def test_the_sum_of_everything_is_finite_exactly_when_every_value_is():
    tensors = mixed_tensors()[11:]
    assert cpu_batches.total(tensors) == pytest.approx(sum(float(t.double().sum()) for t in tensors), rel=1e-5, abs=1e-3)
    for bad in (math.nan, math.inf, -math.inf):
        planted = [t.clone() for t in tensors]
        planted[17].view(-1)[0] = bad  # one small tensor of a batch
        assert not math.isfinite(cpu_batches.total(planted))
    assert cpu_batches.total([]) == 0.0


class _Vector(IterationStatistic):
    columns = ("a", "b")

    def __init__(self, layers, width_of_b):
        super().__init__(layers)
        self._width = width_of_b

    def compute(self, view):
        return {"a": torch.arange(len(self.layers), dtype=torch.float32), "b": [torch.tensor(9.0)] * self._width}


def test_a_row_takes_vectors_and_lists_and_marks_what_is_absent():
    nan = torch.tensor(math.nan)
    family = _Vector(["x", "y", "z"], 3)
    rows = RowBuffer([family])
    results = family.compute(None)
    results["b"] = [torch.tensor(9.0), None, torch.tensor(7.0, dtype=torch.float64)]
    rows.add(5, row_of([family], [results]), nan)
    block = rows.take()
    assert block.columns[(0, "a")].tolist() == [[0.0, 1.0, 2.0]]
    np.testing.assert_array_equal(block.columns[(0, "b")], [[9.0, np.nan, 7.0]])
    assert block.absent[(0, "b")].tolist() == [[False, True, False]] and not block.absent[(0, "a")].any()


def test_a_statistic_that_gives_a_column_of_the_wrong_length_is_refused_clearly():
    family = _Vector(["x", "y", "z"], 2)
    rows = RowBuffer([family])
    with pytest.raises(ValueError, match=r"holds 5 values where .* make 6.*one value per layer"):
        rows.add(0, row_of([family], [family.compute(None)]), torch.tensor(math.nan))
    assert len(rows) == 0


def test_a_kept_plan_follows_its_owners_and_a_stale_one_is_made_again(monkeypatch):
    """The plan is kept while the owners (the weights) are the same objects, whatever new tensors (their
    gradients) come; new owners are planned afresh, and so are tensors whose shape changed under the
    same owners (``weight.data = ...`` of another shape): every value stays the tensor's own."""
    made = []
    real_plan = cpu_batches.plan
    monkeypatch.setattr(cpu_batches, "plan", lambda tensors: made.append(len(tensors)) or real_plan(tensors))
    weights = [torch.randn(8, 4) for _ in range(12)] + [torch.randn(20_000)]
    summaries = reductions.Summaries()

    def check(tensors, owners):
        values = summaries(tensors, WANTED, owners)
        for name in WANTED:
            for index, t in enumerate(tensors):
                assert close(float(values[name][index]), float(reference(t, name)), 1e-5), (name, index)

    for _ in range(3):  # new gradients each iteration, the same weights: planned once
        check([torch.randn_like(w) for w in weights], weights)
    assert made == [13]
    check([torch.randn_like(w) for w in weights[:-1]], weights[:-1])  # other owners
    assert made == [13, 12]
    grads = [torch.randn_like(w) for w in weights[:-1]]
    grads[5] = torch.randn(16, 4)  # a shape changed, the owners the same: the batch's copy is larger
    check(grads, weights[:-1])
    assert made == [13, 12, 12]
    grads[5], grads[9] = torch.randn(8, 4), torch.randn(2, 16)  # ... or no longer stacks
    check(grads, weights[:-1])
    assert made == [13, 12, 12, 12]
    memo = cpu_batches.PlanMemo()
    assert cpu_batches.total(grads, weights[:-1], memo) == pytest.approx(sum(float(g.double().sum()) for g in grads), rel=1e-5, abs=1e-3)
    grads[3] = torch.full((8, 4), math.nan)
    assert math.isnan(cpu_batches.total(grads, weights[:-1], memo))


def test_runs_of_absent_values_are_absent_where_they_are():
    """A column not measured at a step (the update ratio between its copies) is a run of absent values
    in the row, between present ones."""
    nan = torch.tensor(math.nan)
    family = _Vector(["x", "y", "z", "w"], 4)
    rows = RowBuffer([family])
    rows.add(1, [None, None, torch.tensor(2.0), torch.tensor(3.0), torch.tensor(4.0), None, None, torch.tensor(5.0)], nan)
    rows.add(2, [torch.arange(4.0), None, None, None, None], nan)
    block = rows.take()
    np.testing.assert_array_equal(block.columns[(0, "a")], [[np.nan, np.nan, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(block.columns[(0, "b")], [[4.0, np.nan, np.nan, 5.0], [np.nan] * 4])
    assert block.absent[(0, "a")].tolist() == [[True, True, False, False], [False] * 4]
    assert block.absent[(0, "b")].tolist() == [[False, True, True, False], [True] * 4]
