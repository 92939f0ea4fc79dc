"""Selectors of sharded (FSDP) tensors in a process group of one: selectors see a stand-in without values,
a ScoredRows chooses from the rows' scores as on the whole tensor, and a selector that reads values gets
a clear error (the 2-process runs are in tests/integrations/test_fsdp.py)."""

from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tb_plugin.metadata import KINDS
from xray_tb import KeepAll, Selection, SelectionInfo, Selector, TopVariance
from xray_tb.capture.selectors import ScoredRows
from xray_tb.capture.sharded import Gathered, gather_selected


class Norms(ScoredRows):
    """The rows of largest L2 norm, counting how often it scores."""

    calls = 0

    def score(self, rows):
        self.calls += 1
        return rows.norm(dim=1)


class ReadsValues(Selector):
    def select(self, tensor, info):
        return Selection(tuple(tensor.abs().sum(dim=1).argsort()[:2].tolist()))


class OneScore(ScoredRows):
    def score(self, rows):
        return rows.sum()


@pytest.fixture
def sharded(tmp_path):
    """A fully_shard MLP in a gloo group of one, its modules and its full weights before sharding."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        from torch.distributed.fsdp import fully_shard

        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 7), nn.ReLU(), nn.Linear(7, 3))
        full = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
        for layer in (model[0], model[2], model):
            fully_shard(layer)
        yield dict(model.named_modules()), full
    finally:
        dist.destroy_process_group()


def plan(**selectors) -> dict:
    return {layer: {**{kind: kind == "weight" for kind in KINDS}, "selector": selectors.get(f"l{layer}")} for layer in ("0", "2")}


def test_a_scored_rows_behind_keep_all_chooses_once_from_the_scores_as_on_the_full_weight(sharded):
    modules, full = sharded
    norms = Norms(max_rows=3)
    selector = KeepAll(max_elements=4, otherwise=norms)  # both weights are bigger: Norms chooses
    first = gather_selected(None, 0, plan(), modules, selector)
    again = gather_selected(None, 1, plan(), modules, selector)
    assert norms.calls == 2  # once per layer, at the first capture; then the choice is kept
    for layer in ("0", "2"):
        weight = full[f"{layer}.weight"]
        chosen = Norms(max_rows=3).select(weight, SelectionInfo(layer=layer, kind="weight", layer_type="Linear")).indices
        for gathered in (first[(layer, "weight")], again[(layer, "weight")]):
            assert isinstance(gathered, Gathered) and gathered.indices == chosen
            torch.testing.assert_close(gathered.rows, weight[list(chosen)], rtol=0, atol=0)


def test_top_variance_of_a_sharded_weight_is_that_of_the_full_weight(sharded):
    modules, full = sharded
    gathered = gather_selected(None, 0, plan(), modules, TopVariance(max_rows=2))
    for layer in ("0", "2"):
        weight = full[f"{layer}.weight"]
        info = SelectionInfo(layer=layer, kind="weight", layer_type="Linear")
        assert gathered[(layer, "weight")].indices == TopVariance(max_rows=2).select(weight, info).indices


def test_a_selector_that_reads_a_sharded_tensors_values_is_told_what_it_sees(sharded):
    modules, _ = sharded
    gathered = gather_selected(None, 0, plan(l0=ReadsValues()), modules, TopVariance(max_rows=2))
    message = gathered[("0", "weight")]
    assert message.startswith("failed: ReadsValues.select raised ") and "Selectors see a sharded (FSDP) tensor as its global shape only" in message
    assert "'meta' tensor" in message and "ScoredRows" in message
    assert isinstance(gathered[("2", "weight")], Gathered)  # the other layer's frame is not lost


def test_a_score_that_is_not_one_value_per_row_is_named(sharded):
    modules, _ = sharded
    gathered = gather_selected(None, 0, plan(l0=OneScore()), modules, TopVariance(max_rows=2))
    assert gathered[("0", "weight")] == "failed: scoring the rows: ValueError: OneScore.score must return one score per row, shape (7,), got ()"
    with pytest.raises(ValueError, match=r"OneScore.score must return one score per row, shape \(5,\), got \(\)"):
        OneScore().select(torch.zeros(5, 3), SelectionInfo(layer="a", kind="weight", layer_type="Linear"))
