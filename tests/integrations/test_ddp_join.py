"""Xray on a DDP model under ``torch.distributed.algorithms.join.Join`` with uneven inputs (rank 0 has 3
batches, rank 1 has 2): real 2-process gloo runs, each rank a subprocess running this module
(``python -m tests.integrations.test_ddp_join CASE RANK PORT LOGDIR``), guarded by a timeout."""

from __future__ import annotations

import datetime
import json
import os
import re
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from tests.helpers import ranks
from xray_tb import open_run
from xray_tb.health import reading

pytestmark = pytest.mark.slow


def run_ranks(case: str, logdir: Path) -> list[dict]:
    return ranks.run_ranks("tests.integrations.test_ddp_join", case, logdir, timeout=60)


def test_join_without_throwing_warns_once_and_ends_in_a_clear_mismatch(tmp_path):
    start = time.monotonic()
    rank0, rank1 = run_ranks("join", tmp_path)
    assert time.monotonic() - start < 45
    for result in (rank0, rank1):
        (warning,) = [w for w in result["warnings"] if "Join" in w]
        assert "throw_on_early_termination=True" in warning and "collective_timeout" in warning
    assert rank0["steps"] == [0, 1] and rank0["seconds"] < 20
    assert rank0["error"].startswith("DistributedMismatch") and "waited more than 5 s" in rank0["error"]
    assert "ran out of inputs" in rank0["error"] and "Join" in rank0["error"]
    assert rank1["steps"] == [0, 1]  # Join's next all-reduce fails once rank 0 exits
    assert re.search(r"Connection (closed|reset) by peer", rank1["error"])


def test_join_throwing_on_early_termination_stops_every_rank_and_close_works(tmp_path):
    rank0, rank1 = run_ranks("throw", tmp_path)
    assert rank0["error"].startswith("RuntimeError: Detected at least one rank that exhausted inputs")
    assert rank1["error"] == "RuntimeError: Rank 1 exhausted all inputs."
    for result in (rank0, rank1):
        assert result["steps"] == [0, 1] and result["closed"] and result["close_seconds"] < 10
        assert not [w for w in result["warnings"] if "Join" in w]
    assert open_run(str(tmp_path)).records() == {"0": {"output": [0, 1]}, "2": {"output": [0, 1]}}
    assert list(reading.series(str(tmp_path), "grad_l2")[1]) == [0, 1]
    assert list(reading.series(str(tmp_path), "dead_fraction")[1]) == [0, 1]


# The worker: one rank ------------------------------------------------------------------------------


def main(case: str, rank: int, port: str, logdir: str) -> None:
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel

    from xray_tb import Xray

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=30))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(3 + rank)
    batches = [(torch.randn(4, 4, generator=generator), torch.randn(4, 2, generator=generator))
               for _ in range(3 - rank)]  # rank 0: 3 batches, rank 1: 2
    result: dict = {"rank": rank, "steps": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = {"0": {"output": True}, "2": {"output": True}}
        xray = Xray(ddp, batches[0][0], logdir=logdir, every=1, collective_timeout=5, plan=plan)
        start = time.monotonic()
        try:
            with Join([ddp], throw_on_early_termination=case == "throw"):
                for x, y in batches:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(ddp(x), y).backward()
                    result["steps"].append(xray.take_graphs())
                    optimizer.step()
        except RuntimeError as error:
            result["error"] = f"{type(error).__name__}: {error}"
        result["seconds"] = time.monotonic() - start
        start = time.monotonic()
        xray.close()
        result["closed"], result["close_seconds"] = xray.closed, time.monotonic() - start
    result["warnings"] = [str(warning.message) for warning in caught]
    with open(os.path.join(logdir, f"result{rank}.json"), "w") as file:
        json.dump(result, file)
    sys.stdout.flush()
    os._exit(0)  # leave at once, as test_ddp's workers do (the default group as a failed job leaves it)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
