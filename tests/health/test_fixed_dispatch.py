"""A measured iteration on an accelerator dispatches a fixed number of operations whatever the number of
layers (issue 16): batched reductions per (device, dtype), nothing per layer. Counted on the meta device."""

from __future__ import annotations

import torch

from tests.health.dispatched_ops import dispatched_ops

#: Ops that make a view (metadata only, no kernel).
VIEWS = {"view", "unbind", "slice", "select", "as_strided", "alias", "unsqueeze"}


def test_a_measured_iteration_dispatches_as_many_ops_for_200_layers_as_for_3():
    few, many = dispatched_ops(3), dispatched_ops(200)
    assert many == few
    launches = {op: count for op, count in many.items() if op not in VIEWS}
    assert sum(launches.values()) < 60
    assert "empty_like" not in many and "detach" not in many  # the update ratio's copy is one multi-tensor op


def test_weights_of_two_dtypes_are_two_groups_whatever_the_number_of_layers():
    two = (torch.float32, torch.float64)
    assert dispatched_ops(60, shape=(4, 8), dtypes=two) == dispatched_ops(6, shape=(4, 8), dtypes=two)
    assert sum(dispatched_ops(6, dtypes=two).values()) > sum(dispatched_ops(6).values())  # a group's ops again
