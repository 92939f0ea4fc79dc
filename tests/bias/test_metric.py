"""Attention-IoU's identities (Serianni et al.), to 1e-6, and its subgroup aggregation."""

from __future__ import annotations

import math

import pytest
import torch

from xray_tb.bias import SUBGROUPS, attention_iou, chance_level, subgroup_table


def square(top: int, left: int, side: int, size: int = 12) -> torch.Tensor:
    mask = torch.zeros(size, size)
    mask[top : top + side, left : left + side] = 1.0
    return mask


def test_a_map_with_itself_is_one_and_rescaling_changes_nothing():
    g = torch.Generator().manual_seed(0)
    maps = torch.rand(5, 9, 7, generator=g)
    assert torch.allclose(attention_iou(maps, maps), torch.ones(5, dtype=torch.float64), atol=1e-6)
    other = torch.rand(5, 9, 7, generator=g)
    scales = torch.tensor([0.001, 1.0, 3.0, 250.0, 1e4]).view(5, 1, 1)
    assert torch.allclose(attention_iou(maps * scales, other * 7.5), attention_iou(maps, other), atol=1e-6)
    assert torch.allclose(attention_iou(maps, other * scales), attention_iou(maps, other), atol=1e-6)


def test_symmetric_and_in_the_unit_interval():
    g = torch.Generator().manual_seed(1)
    p, q = torch.rand(20, 6, 6, generator=g) ** 3, torch.rand(20, 6, 6, generator=g) ** 3
    forward, backward = attention_iou(p, q), attention_iou(q, p)
    assert torch.allclose(forward, backward, atol=1e-12)
    assert ((forward >= 0) & (forward <= 1)).all()


def test_disjoint_supports_score_zero():
    assert attention_iou(square(0, 0, 4), square(6, 6, 4)).item() == pytest.approx(0.0, abs=1e-6)


def test_two_squares_with_iou_one_third_score_two_thirds():
    a, b = square(0, 0, 4), square(0, 2, 4)  # 16 pixels each, 8 shared: IoU 8 / 24 = 1/3
    assert (a * b).sum() / ((a + b) > 0).sum() == pytest.approx(1 / 3)
    assert attention_iou(a, b).item() == pytest.approx(2 / 3, abs=1e-6)


@pytest.mark.parametrize("shift", [1, 2, 3])
def test_binary_masks_of_equal_area_score_4j_over_1_plus_3j(shift):
    a, b = square(2, 2, 6), square(2 + shift, 2, 6)
    j = float((a * b).sum() / ((a + b) > 0).sum())
    assert attention_iou(a, b).item() == pytest.approx(4 * j / (1 + 3 * j), abs=1e-6)


@pytest.mark.parametrize("side", [1, 3, 6, 12])
def test_uniform_map_against_a_region_scores_the_chance_level(side):
    region = square(0, 0, side)
    f = side * side / 144
    expected = 4 * f / (1 + 3 * f)
    assert attention_iou(torch.full((12, 12), 0.3), region).item() == pytest.approx(expected, abs=1e-6)
    assert chance_level(region.unsqueeze(0)).item() == pytest.approx(expected, abs=1e-6)


def test_batched_equals_per_sample():
    g = torch.Generator().manual_seed(2)
    p, q = torch.rand(8, 5, 5, generator=g), (torch.rand(8, 5, 5, generator=g) > 0.6).float()
    batched = attention_iou(p, q)
    for i in range(8):
        assert batched[i].item() == pytest.approx(attention_iou(p[i], q[i]).item(), abs=1e-6)


def test_an_empty_map_scores_nan_and_bad_maps_are_refused():
    scores = attention_iou(torch.stack([square(0, 0, 3), torch.zeros(12, 12)]), square(0, 0, 3))
    assert scores[0].item() == pytest.approx(1.0) and math.isnan(scores[1].item())
    with pytest.raises(ValueError, match="negative"):
        attention_iou(-square(0, 0, 3), square(0, 0, 3))
    with pytest.raises(ValueError, match="same shape"):
        attention_iou(torch.ones(2, 4, 4), torch.ones(3, 4, 4))
    with pytest.raises(ValueError, match=r"\(B, H, W\)"):
        attention_iou(torch.ones(4), torch.ones(4))
    with pytest.raises(ValueError, match="NaN"):
        attention_iou(torch.full((3, 3), float("nan")), torch.ones(3, 3))


def test_subgroups_mean_count_and_chance():
    scores = torch.tensor([0.9, 0.8, float("nan"), 0.2, 0.4, 0.6])
    target = torch.tensor([1, 1, 1, 0, 0, 0])
    protected = torch.tensor([1, 0, 1, 1, 0, 0])
    chance = torch.tensor([0.2, 0.2, 0.3, 0.1, 0.1, 0.3])
    table = subgroup_table(scores, target, protected, chance)
    assert list(table) == list(SUBGROUPS)
    assert table["all"].count == 5 and table["all"].images == 6
    assert table["all"].mean == pytest.approx((0.9 + 0.8 + 0.2 + 0.4 + 0.6) / 5)
    assert table["all"].chance == pytest.approx((0.2 + 0.2 + 0.1 + 0.1 + 0.3) / 5)  # the scored images only
    assert (table["t1p1"].mean, table["t1p1"].count, table["t1p1"].images) == (pytest.approx(0.9), 1, 2)
    assert table["t1p0"].mean == pytest.approx(0.8)
    assert table["t0p1"].mean == pytest.approx(0.2)
    assert table["t0p0"].mean == pytest.approx(0.5) and table["t0p0"].count == 2
    zero = subgroup_table(scores, target, protected, chance, empty="zero")
    assert zero["t1p1"].mean == pytest.approx(0.45) and zero["t1p1"].count == 2
    assert zero["all"].mean == pytest.approx(2.9 / 6)


def test_an_empty_subgroup_has_no_mean_and_bad_rules_are_named():
    table = subgroup_table(torch.tensor([0.5, 0.7]), torch.tensor([1, 1]), torch.tensor([1, 1]))
    assert math.isnan(table["t0p0"].mean) and table["t0p0"].count == 0 and table["t0p0"].to_json()["mean"] is None
    with pytest.raises(ValueError, match="empty must be 'nan'"):
        subgroup_table(torch.tensor([0.5]), torch.tensor([1]), torch.tensor([1]), empty="skip")
