"""Xray on a ``DistributedDataParallel`` model: real 2-process runs on the gloo backend over 127.0.0.1,
each rank a subprocess (:mod:`tests.integrations.ddp_worker`) guarded by a timeout, so a hang fails
the test instead of hanging it."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
from torch import nn

from tests.helpers import ranks
from tests.helpers.ranks import event_files
from tests.integrations import ddp_worker
from xray_tb import Xray, open_run
from xray_tb.health import HealthOptions
from xray_tb.health import reading

pytestmark = pytest.mark.slow


def run_ranks(case: str, logdir: Path, timeout: float = 60, failing: tuple[int, ...] = ()) -> list[dict]:
    return ranks.run_ranks("tests.integrations.ddp_worker", case, logdir, timeout, failing)


def test_rank_zero_writes_the_run_and_rank_one_writes_nothing(tmp_path):
    results = run_ranks("zero", tmp_path)
    assert len(event_files(tmp_path)) == 1  # rank 0's; rank 1 opened none
    assert not [p for p in tmp_path.rglob("*") if p.is_dir()]
    assert all(result["layers"] == ["0", "1", "2"] for result in results)  # the inner model's names, no "module."
    _, steps, _, _ = reading.series(str(tmp_path), "grad_l2")
    assert list(steps) == [0, 1, 2]


def test_ranks_all_writes_one_run_per_rank(tmp_path):
    run_ranks("all", tmp_path)
    assert not event_files(tmp_path)
    for rank in range(2):
        assert len(event_files(tmp_path / f"rank{rank}")) == 1
        _, steps, _, _ = reading.series(str(tmp_path / f"rank{rank}"), "grad_l2")
        assert list(steps) == [0, 1, 2]


def test_a_unit_is_dead_only_when_dead_on_every_rank(tmp_path):
    # Unit 0 fires on rank 0's input only, unit 1 on rank 1's only, unit 2 on neither.
    results = run_ranks("dead", tmp_path)
    assert [result["dead"] for result in results] == [{"0": [2]}, {"0": [2]}]
    layers, _, values, _ = reading.series(str(tmp_path), "dead_fraction")
    assert values[layers.index("0")].tolist() == pytest.approx([1 / 3, 1 / 3])


def test_a_probe_runs_on_the_writing_rank_without_touching_ddp(tmp_path):
    rank0, rank1 = run_ranks("probe", tmp_path)
    assert rank0["grad"] == rank1["grad"]  # the probe's backward left DDP's gradients alone
    assert open_run(str(tmp_path)).records() == {"0": {"output": [0, 1, 2], "grad": [0, 1, 2], "weight_grad": [0, 1, 2]}}


def test_steps_counted_by_the_optimizer(tmp_path):
    rank0, rank1 = run_ranks("optimizer", tmp_path)
    assert rank0["dead"] == rank1["dead"]
    run = open_run(str(tmp_path))
    assert {steps for kinds in run.records().values() for steps in map(tuple, kinds.values())} == {(0, 2)}
    assert list(reading.series(str(tmp_path), "grad_l2")[1]) == [0, 1, 2, 3]
    assert list(reading.series(str(tmp_path), "dead_fraction")[1]) == [0, 2]


def test_saturation_is_over_the_global_batch(tmp_path):
    run_ranks("saturation", tmp_path)  # rank 0's half saturates the tanh, rank 1's does not
    layers, _, values, _ = reading.series(str(tmp_path), "saturation")
    assert values[layers.index("0")].tolist() == pytest.approx([0.5, 0.5])


def test_a_nonfinite_output_on_one_rank_is_reported_by_every_rank(tmp_path):
    results = run_ranks("nonfinite", tmp_path)  # a NaN in rank 1's input at step 1
    assert results[0]["nonfinite"] == results[1]["nonfinite"]
    step, layer, kind = results[0]["nonfinite"]
    assert (step, layer, kind) == (1, "0", "output")
    assert [finding.rule for finding in reading.findings(str(tmp_path))].count("nonfinite") == 1  # reported once, by rank 0


def test_a_nan_after_the_last_measured_iteration_is_reported_once_at_close_as_in_one_process(tmp_path):
    # No health step sees the NaN input (rank 1's, step 3): the all-reduced gradients carry it to both
    # ranks' sentinels, which find it with no collective; each rank runs its own forward of step 3 again
    # and their activation checks are combined, so both name where rank 1's batch brought it in, as one
    # process on the whole batch does.
    results = run_ranks("late", tmp_path / "ddp")
    assert [result["nonfinite"] for result in results] == [[3, "0", "output"]] * 2
    assert [finding.rule for finding in reading.findings(str(tmp_path / "ddp"))].count("nonfinite") == 1
    model = ddp_worker.mlp()
    x, y = ddp_worker.full_batch()
    with Xray(model, x, logdir=str(tmp_path / "single"), every=10, health=HealthOptions(every=10)) as xray:
        for step in range(4):
            model.zero_grad()
            if step == 3:
                x[1, 0] = float("nan")  # rank 1's first row
            nn.MSELoss()(model(x), y).backward()
            xray.take_graphs()
    assert [xray.first_nonfinite.step, xray.first_nonfinite.layer, xray.first_nonfinite.kind] == [3, "0", "output"]


@pytest.mark.parametrize("case", ["weight_one_rank", "weight_one_rank_stepped"])
def test_a_nan_in_one_ranks_weight_between_health_steps_is_reported_once_without_a_hang(tmp_path, case):
    # Rank 1 finds its own weight, rank 0 only the all-reduced gradients: both still run the forward of
    # step 3 again and combine their activation checks (their finds agree on the gradients), where rank 0
    # alone used to wait in that collective until the timeout.
    # That collective also carries each rank's find, and the ranks agree on it: rank 0, which saw only the
    # gradients the NaN weight made, names rank 1's weight too (before, each rank named what it saw). With an
    # optimizer stepping after each call, rank 1's find waits for that step when the collective runs: its
    # weight's flag, which stands whatever the step does, is what it sends (before, it sent nothing).
    results = run_ranks(case, tmp_path)
    assert [result.get("error") for result in results] == [None, None]
    assert [result["nonfinite"] for result in results] == [[3, "2", "weight"], [3, "2", "weight"]]
    assert [(f.rule, f.step, f.layer) for f in reading.findings(str(tmp_path)) if f.rule == "nonfinite"] == [("nonfinite", 3, "2")]


def test_a_nan_only_one_ranks_copy_of_a_weight_holds_is_reported_by_rank_zero_at_the_next_health_step(tmp_path):
    # Rank 1's copy of an embedding row that no batch looks up turns NaN at step 3: no gradient shows it,
    # so rank 0 finds nothing itself. The health step at 10 carries the ranks' finds: from then on both
    # ranks name it, and rank 0 writes the finding (before, nothing was written: rank 1 writes no events).
    results = run_ranks("hidden_weight_one_rank", tmp_path)
    assert [result.get("error") for result in results] == [None, None]
    assert [result["before_health_step"] for result in results] == [None, [3, "embedding", "weight"]]
    assert [result["nonfinite"] for result in results] == [[3, "embedding", "weight"]] * 2
    assert [(f.rule, f.step, f.layer) for f in reading.findings(str(tmp_path)) if f.rule == "nonfinite"] == [
        ("nonfinite", 3, "embedding")]


@pytest.mark.parametrize("seen", [6, 14])
def test_gradients_that_turn_nan_after_one_rank_alone_found_its_weight_make_no_rank_wait(tmp_path, seen):
    # Rank 1 found its own copy's NaN at step 3 (and stopped checking); from step `seen` the gradients are NaN
    # on both ranks, before the health step at 10 that agrees on rank 1's find or after it. Rank 0 must not
    # start a collective for that find that rank 1, done, would never join.
    results = run_ranks(f"hidden_then_seen_{seen}", tmp_path)
    assert [result.get("error") for result in results] == [None, None]
    assert [result["nonfinite"] for result in results] == [[3, "embedding", "weight"]] * 2


@pytest.mark.parametrize("case", ["late_device", "late_cpu"])
def test_a_nan_in_rank_ones_batch_is_named_where_it_entered_and_blamed_on_the_data_by_both_ranks(tmp_path, case):
    # Rank 1's batch at step 13 (between captures) holds the NaN. On the accelerator's path, forced on the
    # CPU (late_device), the sentinel's finds stay on the device and no forward is run again: each rank
    # flags its own batch, the health step at 20 combines the flags with the activation statistics (no
    # collective more). On the CPU's (late_cpu), each rank runs its forward of step 13 again, and that
    # forward's collective carries whether each rank's batch held the NaN. Both ranks name where it
    # entered and say to check the data, rank 0 whose own batch was finite included.
    results = run_ranks(case, tmp_path)
    assert [result["nonfinite"] for result in results] == [[13, "0", "output"]] * 2
    assert all("the batch of that step held NaN or Inf values" in result["messages"][0] for result in results)
    assert [finding.rule for finding in reading.findings(str(tmp_path))].count("nonfinite") == 1


@pytest.mark.parametrize("planted", [6, 8])  # between health steps, and at one (8: a capture before its iteration)
def test_a_nan_in_an_accumulated_micro_batch_is_named_where_it_entered_by_both_ranks(tmp_path, planted):
    # The NaN is in rank 1's first micro-batch, under no_sync(); the hooks keep the last micro-batch's
    # forward, which is finite. Both ranks run their micro-batches' forwards again: at a health step the
    # activations were measured at the capture already, and the ranks combine where each saw the first
    # non-finite output in a gather of their own (before, both named the last layer's weight_grad there).
    results = run_ranks(f"accumulate_nan_{planted}", tmp_path)
    assert [result["nonfinite"] for result in results] == [[planted, "0", "output"]] * 2
    assert all("the batch of that step held NaN or Inf values" in result["messages"][0] for result in results)
    assert [(f.step, f.layer) for f in reading.findings(str(tmp_path)) if f.rule == "nonfinite"] == [(planted, "0")]


def train_one_process(logdir: Path) -> None:
    """The workers' model trained 3 steps in this process on the whole batch, health measured every iteration."""
    model = ddp_worker.mlp()
    x, y = ddp_worker.full_batch()
    with Xray(model, x, logdir=str(logdir), every=1, health=HealthOptions(every=1)) as xray:
        for _ in range(3):
            model.zero_grad()
            nn.MSELoss()(model(x), y).backward()
            xray.take_graphs()


def assert_statistics_equal(run: Path, reference: Path, stats: tuple[str, ...]) -> None:
    """Each health statistic of ``run`` has the layers, steps and values (within float32 rounding) of ``reference``'s."""
    for stat in stats:
        single_layers, single_steps, single, _ = reading.series(str(reference), stat)
        layers, steps, values, _ = reading.series(str(run), stat)
        assert layers == single_layers and list(steps) == list(single_steps)
        np.testing.assert_allclose(values, single, rtol=1e-4, atol=1e-6, err_msg=f"{stat} of {run.name}")


def test_gradient_statistics_equal_those_of_one_process_on_the_whole_batch(tmp_path):
    run_ranks("grads", tmp_path / "ddp")
    train_one_process(tmp_path / "single")
    for rank in range(2):
        assert_statistics_equal(tmp_path / "ddp" / f"rank{rank}", tmp_path / "single", ("grad_l2", "channel_var", "dead_fraction"))


@pytest.mark.parametrize("case", ["one", ranks.GPU_CASE])
def test_ddp_of_one_process_records_and_measures_as_without_ddp_on_a_cpu_and_on_a_gpu(tmp_path, case):
    # One rank on the CPU with gloo, or on a GPU with NCCL (on a machine with one GPU, one NCCL rank: the
    # CUDA path of the two-rank cases above, Xray's collectives moved through host memory).
    (result,) = ranks.run_ranks("tests.integrations.ddp_worker", case, tmp_path / "ddp", world=1)
    assert ranks.unexpected_warnings(result["warnings"]) == []
    assert result["device"] == ("cuda" if case == "cuda" else "cpu")
    run = open_run(str(tmp_path / "ddp"))
    assert run.records() == {"0": {kind: [0, 1, 2] for kind in ("weight", "weight_grad", "output", "activation", "grad")}}
    for kind in ("weight", "weight_grad"):  # no optimizer step: the weight, and each step's gradient, stay the same
        values, header = run.load("0", kind, 2)
        np.testing.assert_allclose(values.numpy(), np.asarray(result[kind], dtype=np.float32)[header.indices], rtol=1e-6, atol=1e-7)
    train_one_process(tmp_path / "single")
    assert_statistics_equal(tmp_path / "ddp", tmp_path / "single", ("grad_l2", "weight_l2", "channel_var", "dead_fraction"))


def test_a_rank_that_skips_its_last_take_graphs_call_leaves_the_other_to_time_out_cleanly(tmp_path):
    rank0, rank1 = run_ranks("last", tmp_path)
    assert "waited more than 3 s" in rank0["error"] and "take_graphs()" in rank0["error"]
    assert rank0["seconds"] < 20
    assert "error" not in rank1  # it made one call fewer: nothing left for it to wait for


def test_a_rank_that_skips_a_take_graphs_call_mid_run_fails_both_ranks_without_a_hang(tmp_path):
    # Rank 0 waits alone in Xray's collective while rank 1 went on to DDP's next all-reduce: rank 0
    # raises after the timeout and stops, and rank 1's all-reduce then fails (its peer is gone).
    # Rank 0 exits as a script does (no os._exit), and the default group waits 600 s here: Xray's own
    # group, whose collective fails in gloo at Xray's timeout, leaves nothing pending to keep it alive.
    start = time.monotonic()
    _, rank1 = run_ranks("skip", tmp_path, failing=(0, 1))
    assert time.monotonic() - start < 45
    assert "waited more than 3 s" in json.loads((tmp_path / "result0.json").read_text())["error"]
    assert re.search(r"Connection (closed|reset) by peer", rank1["output"])


def test_an_xray_on_rank_zero_only_gives_up_at_construction_and_the_job_ends(tmp_path):
    # The default group waits 600 s here: Xray's own group and timeout (3 s) end the job, and the rank
    # left in DDP's all-reduce fails once rank 0 exits.
    start = time.monotonic()
    rank0, _ = run_ranks("rank0only", tmp_path, failing=(1,))
    assert "construction collective at step 0" in rank0["error"] and "waited more than 3 s" in rank0["error"]
    assert "Every rank must create its Xray at the same point" in rank0["error"]
    assert rank0["seconds"] < 20 and time.monotonic() - start < 45


def test_ranks_at_different_steps_raise_on_every_rank(tmp_path):
    results = run_ranks("steps", tmp_path)
    for result in results:
        assert "different health steps" in result["error"] and "rank 1 at step 1" in result["error"]


@pytest.mark.parametrize("case", ["layers", "same_size_layers"])
def test_ranks_that_measured_different_layers_raise_on_every_rank(tmp_path, case):
    # layers: rank 1's forward skips a layer, so its part of the health step is shorter. The ranks agree
    # on the size they send, so neither aborts on a buffer of the wrong size: both raise. same_size_layers:
    # rank 0 skips b and rank 1 skips c, of the same size: the parts' sizes agree, their fingerprints do not.
    results = run_ranks(case, tmp_path)
    for result in results:
        assert "measured different layers" in result["error"] and "rank 1 at step 0" in result["error"]
        assert result["seconds"] < 5  # at once, not after the timeout (10 s)
    fingerprints = re.findall(r"fingerprint ([0-9a-f]{8})", results[0]["error"])
    assert len(fingerprints) == 2 and len(set(fingerprints)) == 2


def test_training_health_failing_on_one_rank_stops_that_rank_and_the_others_without_a_hang(tmp_path):
    # Training health fails on rank 1 at step 1 (a fault injected there): skipping health would leave rank 0
    # waiting in the health step's gather, so rank 1 raises DistributedMismatch naming the error, and rank 0's
    # gather fails.
    results = run_ranks("health_fails", tmp_path)
    assert "rank 1: training health failed at step 1 (ValueError: training health failed on purpose)" in results[1]["error"]
    assert "health=False" in results[1]["error"]
    assert results[0]["error"]  # its step 1 gather: the peer raised instead of joining
    assert all(result["seconds"] < 10 for result in results)  # before the collective timeout


def test_a_user_statistic_failing_on_one_rank_costs_its_values_only(tmp_path):
    # xray.add_statistic's function raises on rank 1 at step 1: that value is missing, the built-in statistics
    # and every collective go on, and rank 1 warns once naming the statistic.
    results = run_ranks("statistic_fails", tmp_path)
    assert all("error" not in result for result in results)
    assert results[0]["warnings"] == []
    assert len(results[1]["warnings"]) == 1 and "statistic 'fragile' failed on a weight's gradient (ValueError: a user " \
        "statistic failed)" in results[1]["warnings"][0]
    fragile = results[0]["fragile"]  # rank 0's run: {step: value per layer}
    assert sorted(fragile) == ["0", "1", "2"]
    assert all(value is not None and value > 0 for step in ("0", "2") for value in fragile[step])


def test_gathers_of_different_kinds_that_meet_raise_on_every_rank(tmp_path):
    # Rank 0 gathers for a measured iteration, rank 1 for a capture (as when a rank skipped a gather), of
    # the same step and size: their heads' kinds differ, so neither combines the other's values.
    results = run_ranks("kinds", tmp_path)
    for result in results:
        assert "gathers of different kinds met" in result["error"]
        assert "rank 0 at step 3 (2 values, iteration gather" in result["error"]
        assert "rank 1 at step 3 (2 values, capture gather" in result["error"]
        assert result["seconds"] < 5  # at once, not after the timeout (10 s)
