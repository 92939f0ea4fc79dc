"""The pace of the per-iteration statistics: every iteration, every n-th, or as many as fit a budget."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from xray_tb import HealthOptions, Xray, open_run
from xray_tb.health.options import budget_for
from xray_tb.health.pacing import MAX_EVERY, WARMUP, Pacer


def drive(pacer: Pacer, iterations: int, step_seconds: float, cost_seconds: float) -> list[int]:
    """The iterations ``pacer`` measures when a training step takes ``step_seconds`` and a measurement
    ``cost_seconds`` (clocked as they would be)."""
    now, measured = 0.0, []
    for index in range(iterations):
        if pacer.due(index):
            measured.append(index)
            pacer.measured(index, cost_seconds, now)
            now += cost_seconds
        now += step_seconds
    return measured


def test_a_fixed_pace_measures_every_nth_iteration():
    assert drive(Pacer(3, 0.02), 10, 1e-3, 1e-3) == [0, 3, 6, 9]


def test_the_automatic_pace_measures_everything_when_it_is_cheap():
    assert drive(Pacer("auto", 0.02), 500, 10e-3, 50e-6) == list(range(500))  # 0.5 % of the step


def test_the_automatic_pace_thins_to_its_budget_when_steps_are_short():
    pacer = Pacer("auto", 0.02)
    measured = drive(pacer, 5000, 0.4e-3, 0.13e-3)  # a 0.4 ms MLP step, 0.13 ms of reductions
    assert measured[:WARMUP] == list(range(WARMUP))  # measured at every iteration while warming up
    steady = [b - a for a, b in zip(measured[100:], measured[101:])]
    assert set(steady) == {pacer.every} and 10 <= pacer.every <= MAX_EVERY
    assert 0.13e-3 / pacer.every <= 0.02 * 0.4e-3  # within the budget


def test_the_default_budget_on_an_accelerator_measures_every_iteration_wherever_every_1_meets_its_cost_bar():
    """A network with short GPU steps (8 ms) may pay up to 5% for every=1 (at most 1.05x): wherever a
    measured iteration costs that or less, the automatic pace measures every iteration too."""
    budget = budget_for(HealthOptions(), "cuda")
    for cost in (0.1e-3, 0.3e-3, 0.39e-3):  # up to just under 5% of the step
        assert drive(Pacer("auto", budget), 500, 8e-3, cost) == list(range(500)), cost
    above = drive(Pacer("auto", budget), 2000, 8e-3, 0.7e-3)  # 8.75%: thinned, to one in two once settled
    assert {b - a for a, b in zip(above[-100:], above[-99:])} == {2}
    on_cpu = drive(Pacer("auto", budget_for(HealthOptions(), "cpu")), 2000, 8e-3, 0.3e-3)  # the CPU's budget thins it
    assert len(on_cpu) < 200


def tiny():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def test_measured_iterations_hold_the_exact_statistics_under_the_automatic_pace(tmp_path):
    model = tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    truth = {}
    with Xray(model, input_size=(16,), logdir=str(tmp_path), every=1000, health=HealthOptions(budget=0.001)) as xray:
        for step in range(300):
            x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            truth[step] = model[0].weight.grad.norm().item()
            xray.take_graphs(step)
            optimizer.step()
    layers, steps, values = open_run(tmp_path).health("grad_l2")
    row = values[layers.index("0")]
    measured = [int(step) for step, value in zip(steps, row) if value == value]  # NaN: not measured
    assert measured[:WARMUP] == list(range(WARMUP)) and len(measured) < 300  # thinned after the warm-up
    for step, value in zip(steps, row):
        if value == value:
            assert abs(value - truth[int(step)]) <= 1e-5 * truth[int(step)]


def test_captures_write_health_at_most_once_per_flush_seconds_of_training(tmp_path):
    model = tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    xray = Xray(model, input_size=(16,), logdir=str(tmp_path), every=1, health=HealthOptions(every=1, flush_seconds=3600))
    for step in range(6):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        xray.take_graphs(step)  # a capture at every step
        optimizer.step()
    written = open_run(tmp_path).health("grad_l2")[1]
    assert list(written) == [0]  # the first capture wrote; the next ones were within the hour of training
    xray.close()
    assert list(open_run(tmp_path).health("grad_l2")[1]) == list(range(6))  # close wrote the rest
