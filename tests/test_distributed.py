"""Xray's options for torch.distributed, in one process: the checks of ``ranks=`` and
``collective_timeout=``, and a ``DistributedDataParallel`` in a group of one (the 2-process runs are in
tests/integrations/test_ddp.py)."""

from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from xray_tb import Xray
from xray_tb.distributed import NullSink, unwrap
from xray_tb.health import pruning
from xray_tb.health.scope import ActivationLayer


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


@pytest.mark.parametrize("options, message", [
    ({"ranks": "one"}, "ranks= is 'zero'"),
    ({"collective_timeout": 0}, "positive number of seconds"),
    ({"collective_timeout": "5"}, "positive number of seconds"),
])
def test_bad_distributed_options_are_refused_before_anything_is_written(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        Xray(mlp(), input_size=(4,), logdir=str(tmp_path / "run"), **options)
    assert not (tmp_path / "run").exists()


def test_a_ddp_model_in_a_group_of_one_is_looked_into_and_written_as_one_process(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        ddp = DistributedDataParallel(mlp())
        assert unwrap(ddp) is ddp.module and unwrap(ddp.module) is ddp.module
        with Xray(ddp, input_size=(4,), logdir=str(tmp_path / "run"), ranks="all", collective_timeout=datetime.timedelta(seconds=5)) as xray:
            assert sorted(xray.plan) == ["0", "1", "2"]
            nn.MSELoss()(ddp(torch.randn(3, 4)), torch.zeros(3, 2)).backward()
            assert xray.take_graphs() == 0
            assert xray.logdir == str(tmp_path / "run")  # a group of one: no rank folder
        assert xray.records()
    finally:
        dist.destroy_process_group()


def test_the_prune_plan_of_a_sharded_layer_issues_no_collective():
    # Rank 0 alone writes the plan (when its monitor flushes): a DTensor op there, such as indexing the
    # weight, would issue a collective the other ranks do not, and shift every later one (gloo aborts).
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        model = fully_shard(mlp())  # at its root only: its Linear layers keep their class, so they are prunable
        layer = ActivationLayer("0", model[0], None, "ReLU", {}, last_dim_units=True, prunable=None)
        with CommDebugMode() as comms:
            entries = pruning.plan({"0": layer}, {"0": [1, 5]})
        assert comms.get_total_counts() == 0
        assert [(entry.layer, entry.parameters) for entry in entries] == [("0", 2 * (4 + 1))]
    finally:
        dist.destroy_process_group()


def test_the_null_sink_takes_every_write():
    sink = NullSink("runs/x")
    sink.add(None, step=0)
    sink.add_event(None)
    sink.flush()
    sink.close()
    assert sink.logdir == "runs/x"
