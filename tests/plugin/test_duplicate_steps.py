"""A step written twice is served as its last write, by real TensorBoard on both loaders, and read
back as its last write by the recorder's own reader (:func:`xray_tb.open_run`): one rule on both
read paths (see docs/design.md, "Two read paths, one rule").

The run folders are written by the real recorder: a step repeated within one event file, and a
second Xray resuming into the folder of a first one (a second event file, the same steps, other
values and another plan).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from tests.plugin import http_client
from xray_tb import Xray, open_run


def weight_value(session: int, step: int, rewrite: bool = False) -> float:
    """The value every weight holds when ``session`` captures ``step`` (``+0.5`` for a rewrite)."""
    return 100.0 * session + step + (0.5 if rewrite else 0.0)


def record_session(run_dir, session: int, steps, *, repeat=(), plan_bias: bool = False) -> None:
    """One Xray over a Linear layer whose weights are set to :func:`weight_value` before each capture;
    each step in ``repeat`` is captured a second time, with the rewrite value."""
    model = nn.Sequential(nn.Linear(3, 2))
    plan = {"0": {"weight": True, "bias": plan_bias}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the recorder warns about repeated steps and reused folders
        with Xray(model, input_size=(3,), logdir=str(run_dir), plan=plan) as xray:
            for step in steps:
                for rewrite in (False, True) if step in repeat else (False,):
                    with torch.no_grad():
                        model[0].weight.fill_(weight_value(session, step, rewrite))
                    xray.take_graphs(step)
    time.sleep(1.01 - time.time() % 1)  # the next event file is named after a later second


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("duplicates")
    record_session(root / "repeated", 1, range(5), repeat={2})
    record_session(root / "resumed", 1, range(5), repeat={3})
    record_session(root / "resumed", 2, range(5), plan_bias=True)
    record_session(root / "partly", 1, range(6))
    record_session(root / "partly", 2, range(2, 4))
    return root


def served_weight(url: str, run: str, step: int) -> float:
    status, body = http_client.get(url, "/frame", run=run, layer="0", kind="weight", step=step)
    assert status == 200, body
    values = np.concatenate([panel.ravel() for panel in http_client.panels(body)])
    assert values.size == 6 and np.all(values == values[0])
    return float(values[0])


def served_steps(url: str, run: str) -> list[int]:
    status, body = http_client.get(url, "/layers", run=run)
    assert status == 200, body
    assert body["layers"][0]["kinds"]["weight"] == body["steps"]
    return body["steps"]


@pytest.mark.slow
def test_a_step_repeated_within_one_file_serves_its_last_write(server):
    _, url = server
    assert served_steps(url, "repeated") == [0, 1, 2, 3, 4]
    assert [served_weight(url, "repeated", step) for step in range(5)] == [100, 101, 102.5, 103, 104]


@pytest.mark.slow
def test_a_resumed_run_serves_the_second_writer(server):
    _, url = server
    assert served_steps(url, "resumed") == [0, 1, 2, 3, 4]
    assert [served_weight(url, "resumed", step) for step in range(5)] == [200, 201, 202, 203, 204]
    status, plan = http_client.get(url, "/plan", run="resumed")
    assert status == 200 and plan["0"]["bias"] is True  # the plan of the second Xray, not the first one's


@pytest.mark.slow
def test_a_run_resumed_from_an_earlier_step(server):
    """Steps 2 and 3 are rewritten. The Python loader keeps the first writer's steps 4 and 5;
    the fast loader forgets them (it drops every step at or after a rewritten one)."""
    loader, url = server
    kept = [0, 1, 2, 3, 4, 5] if loader == "python" else [0, 1, 2, 3]
    assert served_steps(url, "partly") == kept
    expected = {0: 100, 1: 101, 2: 202, 3: 203, 4: 104, 5: 105}
    assert [served_weight(url, "partly", step) for step in kept] == [expected[step] for step in kept]


#: What each run holds under the rule, ``{step: weight value}``: the last write of each step wins.
LAST_WRITES = {
    "repeated": {0: 100, 1: 101, 2: 102.5, 3: 103, 4: 104},
    "resumed": {0: 200, 1: 201, 2: 202, 3: 203, 4: 204},
    "partly": {0: 100, 1: 101, 2: 202, 3: 203, 4: 104, 5: 105},
}


@pytest.mark.slow
@pytest.mark.parametrize("run", sorted(LAST_WRITES))
def test_the_recorders_read_back_follows_the_same_rule(logdir, run):
    """The same runs read back without TensorBoard give the values the Python loader serves (the fast
    loader serves the same values, less the steps its data server forgets after a rewritten one)."""
    recorded = open_run(logdir / run)
    expected = LAST_WRITES[run]
    assert recorded.records()["0"]["weight"] == sorted(expected)
    for step, value in expected.items():
        values, header = recorded.load("0", "weight", step)
        assert header.step == step and torch.all(values == value), (step, values)
    assert recorded.plan["0"]["bias"] is (run == "resumed")  # the plan written last
