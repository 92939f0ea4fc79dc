"""Xray on a ``fully_shard`` (FSDP) model: real 2-process runs on the gloo backend over 127.0.0.1, each
rank a subprocess (:mod:`tests.integrations.fsdp_worker`) guarded by a timeout. The workers report the
full weights and gradients (``full_tensor()``) that the recorded frames and statistics are checked
against."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests.helpers import ranks
from tests.helpers.ranks import event_files
from tests.integrations import fsdp_worker
from tests.integrations.ddp_worker import full_batch
from xray_tb import SelectionInfo, TopVariance, Xray, open_run
from xray_tb.health import HealthOptions, reading

pytestmark = pytest.mark.slow

ITERATION_STATS = ("grad_l2", "grad_l1", "grad_absmax", "grad_mean", "grad_var", "weight_l2", "update_ratio")


def run_ranks(case: str, logdir: Path) -> list[dict]:
    return ranks.run_ranks("tests.integrations.fsdp_worker", case, logdir)


@pytest.fixture(scope="module")
def zero(tmp_path_factory) -> tuple[Path, list[dict]]:
    """The default run: rank 0 writes."""
    logdir = tmp_path_factory.mktemp("fsdp")
    return logdir, run_ranks("zero", logdir)


def assert_frames_are_the_selected_rows(logdir: Path, steps: list[dict]) -> None:
    run = open_run(str(logdir))
    assert run.records() == {"0": {"weight": [0, 1, 2], "weight_grad": [0, 1, 2], "activation": [0, 1, 2]},
                             "2": {"weight": [0, 1, 2], "weight_grad": [0, 1, 2]}}
    for step, layers in enumerate(steps):
        for layer, kinds in layers.items():
            for kind, full in kinds.items():
                values, header = run.load(layer, kind, step)
                full = np.asarray(full, dtype=np.float32)
                assert header.original_shape == list(full.shape)
                np.testing.assert_array_equal(values.numpy(), full[header.indices], err_msg=f"{layer} {kind} at step {step}")


def test_rank_zero_writes_frames_that_are_the_full_weights_selected_rows(zero):
    logdir, (rank0, rank1) = zero
    assert len(event_files(logdir)) == 1  # rank 0's; rank 1 opened none
    assert not [p for p in logdir.rglob("*") if p.is_dir()]
    assert rank0["layers"] == rank1["layers"] == ["0", "1", "2"]  # the inner model's names
    # fully_shard turns each Linear into an FSDPLinear: Xray still sees a Linear, and drafts it as one
    assert rank0["types"] == {"0": "Linear", "1": "ReLU", "2": "Linear"}
    assert rank0["drafted"]["0"]["activation"] is True
    assert rank0["steps"] == rank1["steps"]
    _, header = open_run(str(logdir)).load("0", "weight", 0)
    assert len(header.indices) == 3 and min(header.indices) < 4 <= max(header.indices)  # rows of both shards (4 + 3)
    assert_frames_are_the_selected_rows(logdir, rank0["steps"])


def test_no_rank_warns(zero):
    _, results = zero
    assert [result["warnings"] for result in results] == [[], []]


def assert_health_equals_one_process(logdir: Path, single_logdir: Path, outputs: int = 3) -> None:
    """The run's gradient and weight statistics are those of one process training the whole model on the
    whole batch."""
    model = fsdp_worker.mlp(outputs)
    x, y = full_batch()
    y = fsdp_worker.targets(y, outputs)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(model, x, logdir=str(single_logdir), every=1, health=HealthOptions(every=1, update_every=1)) as xray:
        for _ in range(3):
            optimizer.zero_grad()
            nn.MSELoss()(model(x), y).backward()
            xray.take_graphs()
            optimizer.step()
    for stat in ITERATION_STATS:
        single_layers, single_steps, single, single_present = reading.series(str(single_logdir), stat)
        layers, steps, values, present = reading.series(str(logdir), stat)
        assert layers == single_layers == ["0", "2"] and list(steps) == list(single_steps)
        assert (present == single_present).all() and present.any()
        np.testing.assert_allclose(values[present], single[present], rtol=1e-4, atol=1e-7, err_msg=stat)


def test_gradient_and_weight_statistics_equal_those_of_one_process_on_the_whole_batch(zero, tmp_path):
    assert_health_equals_one_process(zero[0], tmp_path)


@pytest.mark.parametrize("case", ["empty_shard", "hsdp", "hsdp4"])
def test_norms_of_an_empty_shard_and_of_hsdp_replicas_are_the_full_tensors(tmp_path, case):
    # empty_shard: layer 2 has one row, so rank 1's shard of it is empty (0 rows). hsdp: a 2 x 1 mesh
    # (replicate x shard), each rank holds a replica of the whole weight, which must count once. hsdp4:
    # four ranks on a 2 x 2 mesh, two replicas of each weight sharded in two: each shard counts once.
    world = fsdp_worker.WORLDS.get(case, 2)
    results = ranks.run_ranks("tests.integrations.fsdp_worker", case, tmp_path / "ranks", world=world)
    assert [result["warnings"] for result in results] == [[]] * world
    assert_frames_norms_and_health_are_the_full_tensors(tmp_path, results[0]["steps"], fsdp_worker.OUTPUTS.get(case, 3))


def test_under_mixed_precision_frames_and_norms_are_the_full_float32_tensors(tmp_path):
    # MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): the forward and backward run on
    # bfloat16 copies; the sharded parameters and their gradients, which Xray records, stay float32.
    results = ranks.run_ranks("tests.integrations.fsdp_worker", "mixed", tmp_path / "ranks")
    assert [result["warnings"] for result in results] == [[], []]
    assert_frames_and_norms_are_the_full_tensors(tmp_path / "ranks", results[0]["steps"])
    run = open_run(str(tmp_path / "ranks"))
    assert run.load("0", "weight", 2)[1].dtype == "float32"
    values, header = run.load("0", "activation", 2)  # computed in bfloat16
    assert header.dtype == "bfloat16" and header.original_shape == [4, 7] and np.isfinite(values.numpy()).all()


def assert_frames_and_norms_are_the_full_tensors(logdir: Path, steps: list[dict]) -> None:
    """Frames are the full weights' selected rows, and weight and gradient L2 norms those of the full tensors."""
    assert_frames_are_the_selected_rows(logdir, steps)
    for stat, kind in (("weight_l2", "weight"), ("grad_l2", "weight_grad")):
        layers, _, values, _ = reading.series(str(logdir), stat)
        full = [[torch.tensor(step[layer][kind]).norm().item() for step in steps] for layer in layers]
        np.testing.assert_allclose(values, full, rtol=1e-5, err_msg=stat)


def assert_frames_norms_and_health_are_the_full_tensors(tmp_path: Path, steps: list[dict], outputs: int = 3) -> None:
    """The run in ``tmp_path / "ranks"``: frames and norms are the full tensors', and the statistics those of
    one process on the whole batch."""
    assert_frames_and_norms_are_the_full_tensors(tmp_path / "ranks", steps)
    assert_health_equals_one_process(tmp_path / "ranks", tmp_path / "single", outputs)


@pytest.mark.parametrize("case", ["one", ranks.GPU_CASE])
def test_one_rank_records_its_sharded_weights_as_the_full_tensors_on_a_cpu_and_on_a_gpu(tmp_path, case):
    # One process holds the one shard of each weight, still a DTensor: on a CPU with gloo, and on a GPU
    # with NCCL (on a machine with one GPU, one NCCL rank: the CUDA path of the two-rank cases above).
    (result,) = ranks.run_ranks("tests.integrations.fsdp_worker", case, tmp_path / "ranks", world=1)
    assert ranks.unexpected_warnings(result["warnings"]) == []
    assert result["device"] == ("cuda" if case == "cuda" else "cpu")
    assert result["sharded_after_construction"] == "DTensor"
    assert_frames_norms_and_health_are_the_full_tensors(tmp_path, result["steps"])


def test_every_collective_of_captures_and_health_is_xrays_own(zero):
    # Xray's all_gather (c10d.allgather_, with its timeout); a DTensor op would show as c10d_functional.*
    _, results = zero
    assert [sorted(set(result["collectives"])) for result in results] == [["c10d.allgather_"]] * 2


def test_top_variance_of_a_sharded_weight_is_the_full_weights_chosen_from_every_ranks_scores(tmp_path):
    # Each rank scores its own rows, one gather of Xray's brings the scores, and the choice is the one
    # TopVariance makes on the whole weight in one process (and no DTensor op ran, see the collectives).
    results = run_ranks("topvariance", tmp_path)
    steps = results[0]["steps"]
    assert [sorted(set(result["collectives"])) for result in results] == [["c10d.allgather_"]] * 2
    assert [result["warnings"] for result in results] == [[], []]
    run = open_run(str(tmp_path))
    single = TopVariance(max_rows=3)  # chosen at the first capture, from the weight, and kept for its gradient
    for layer in ("0", "2"):
        weight = torch.tensor(steps[0][layer]["weight"])
        chosen = list(single.select(weight, SelectionInfo(layer=layer, kind="weight", layer_type="Linear")).indices)
        for step in range(3):
            for kind in ("weight", "weight_grad"):
                values, header = run.load(layer, kind, step)
                assert header.indices == chosen, (layer, kind, step)
                full = np.asarray(steps[step][layer][kind], dtype=np.float32)
                np.testing.assert_array_equal(values.numpy(), full[chosen], err_msg=f"{layer} {kind} at step {step}")
    _, header = run.load("0", "weight", 0)
    assert min(header.indices) < 4 <= max(header.indices)  # rows of both shards (4 + 3)


def test_weight_frames_of_parameters_left_unsharded_between_micro_batches_let_fsdp_reshard_them(tmp_path):
    """torch's own .numpy() would mark an unsharded parameter's storage as never to be resized, and FSDP's
    next reshard (which resizes it to nothing) would fail in the backward."""
    rank0, rank1 = run_ranks("accumulate", tmp_path)
    assert rank0["micro_batches"] == rank1["micro_batches"] == 6
    assert rank0["warnings"] == rank1["warnings"] == []
    run = open_run(str(tmp_path))
    assert run.records() == {"0": {"weight": [0, 2, 4]}, "2": {"weight": [0, 2, 4]}}
    for step, layers in zip([0, 2, 4], rank0["steps"]):
        for layer, weight in layers.items():
            values, header = run.load(layer, "weight", step)
            full = np.asarray(weight, dtype=np.float32)
            np.testing.assert_array_equal(values.numpy(), full[header.indices], err_msg=f"{layer} at step {step}")


def test_ranks_all_writes_one_run_per_rank(tmp_path):
    results = run_ranks("all", tmp_path)
    assert not event_files(tmp_path)
    for rank in range(2):
        assert_frames_are_the_selected_rows(tmp_path / f"rank{rank}", results[rank]["steps"])


def test_sparse_calls_without_optimizer_warn_once_that_health_sees_only_the_calls(tmp_path):
    # FSDP's sharded gradients fire no hook Xray could follow: only take_graphs() calls are iterations.
    for result in run_ranks("sparse", tmp_path):
        assert len(result["warnings"]) == 1
        assert "checked only at the iterations that call take_graphs()" in result["warnings"][0]


def test_a_model_sharded_at_its_root_only_stays_sharded_after_tracing(tmp_path):
    # Its Linear layers keep their class (no FSDPLinear): rank 0's prune plan, written when its monitor
    # flushes, once indexed a DTensor weight, a collective rank 1 did not issue (see test_distributed).
    rank0, rank1 = run_ranks("root", tmp_path)
    assert rank0["sharded_after_construction"] == rank1["sharded_after_construction"] == "DTensor"
    assert_frames_are_the_selected_rows(tmp_path, rank0["steps"])
    assert rank0["warnings"] == rank1["warnings"] == []
    assert rank0["prune"] == rank1["prune"] and rank0["prune"], "some unit died"
    assert all(parameters == 0 and "sharded (FSDP)" in reason for _, parameters, reason in rank0["prune"])


def test_a_nan_in_one_ranks_shard_is_the_origin_on_every_rank(tmp_path):
    # Rank 1's shard of layer 2's weight gets a NaN at step 2, an iteration the statistics skip: only the
    # sentinel sees it, on rank 1; rank 0 sees non-finite gradients only. The ranks agree on the weight.
    results = run_ranks("nonfinite", tmp_path)
    assert [result["nonfinite"] for result in results] == [[2, "2", "weight"], [2, "2", "weight"]]


def nonfinite_findings(logdir: Path) -> list[tuple[int, str]]:
    """(step, layer) of each nonfinite finding written to the run."""
    return [(finding.step, finding.layer) for finding in reading.findings(str(logdir)) if finding.rule == "nonfinite"]


#: Where a NaN planted after the last measured iteration starts: in rank 1's shard of layer 2's weight, or
#: of layer 0's gradient (which rank 0 never sees); one process is the reference for both.
LATE_NANS = [("late_weight", [3, "2", "weight"]), ("late_grad", [3, "0", "weight_grad"])]


@pytest.mark.parametrize("case, found", LATE_NANS)
def test_a_nan_after_the_last_measured_iteration_is_agreed_at_close_and_reported_once(tmp_path, case, found):
    # Iterations 0 and 1 are measured; the NaN comes at step 3 in rank 1's shard (a gradient's: rank 0 sees
    # nothing), and one rank closes 2 s after the other. One process reports the same (below).
    results = run_ranks(case, tmp_path)
    assert [result["before_close"] for result in results] == [None, None]  # nothing agreed before close
    assert [result["nonfinite"] for result in results] == [found, found]
    assert [result.get("error") for result in results] == [None, None]
    assert [result["warnings"] for result in results] == [[], []]
    assert nonfinite_findings(tmp_path) == [(found[0], found[1])]


@pytest.mark.parametrize("case, step", [("batch_device", 13), ("batch_device_late", 23), ("batch_cpu", 13), ("batch_cpu_late", 23)])
def test_a_nan_in_rank_ones_batch_is_named_where_it_entered_by_both_ranks(tmp_path, case, step):
    # Each rank flags its own batch (on a CPU too: FSDP's forward cannot run again on one rank, so the
    # batch is watched as on an accelerator, whose path the "device" cases force on the CPU); whether the
    # first find's batch held the NaN on any rank rides the ranks' agreement on the find, at the next
    # measured iteration or, after the last one (23), at close. Before, the CPU named the last layer's
    # weight_grad, where backward starts.
    results = run_ranks(case, tmp_path)
    assert [result["nonfinite"] for result in results] == [[step, "0", "output"]] * 2


def test_a_rank_that_never_closes_leaves_the_other_to_close_after_the_timeout(tmp_path):
    rank0, rank1 = run_ranks("never_closes", tmp_path)
    assert "close collective at step 3" in rank0["error"] and "waited more than 3 s" in rank0["error"]
    assert "Every rank must call xray.close()" in rank0["error"]
    assert rank0["close_seconds"] < 8  # before rank 1 stopped waiting: the timeout, not the other rank, ended it
    # Rank 0 closed everything and reports the NaN as it saw it: its shards hold no NaN weight, and of the
    # gradients only layer 0's (the NaN weight row is rank 1's, and so is that row of layer 2's gradient).
    assert rank0["nonfinite"] == [3, "0", "weight_grad"]
    assert nonfinite_findings(tmp_path) == [(3, "0")]
    assert "nonfinite" not in rank1


@pytest.mark.parametrize("case, found", LATE_NANS)
def test_one_process_reports_a_nan_after_the_last_measured_iteration_at_close(tmp_path, case, found):
    # The reference for the FSDP runs above: the same NaN in the full model (rank 1 holds rows 2 of layer
    # 2's weight and 4 to 6 of layer 0's).
    model = fsdp_worker.mlp()
    x, y = full_batch()
    y = fsdp_worker.targets(y)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    xray = Xray(model, x, logdir=str(tmp_path), every=1, health=HealthOptions(every=10))
    for step in range(4):
        optimizer.zero_grad()
        if step == 3 and case == "late_weight":
            with torch.no_grad():
                model[2].weight[2, 0] = float("nan")
        nn.MSELoss()(model(x), y).backward()
        if step == 3 and case == "late_grad":
            model[0].weight.grad[4, 0] = float("nan")
        xray.take_graphs()
        optimizer.step()
    xray.close()
    assert [xray.first_nonfinite.step, xray.first_nonfinite.layer, xray.first_nonfinite.kind] == found
    assert nonfinite_findings(tmp_path) == [(found[0], found[1])]


def test_a_rank_that_creates_no_xray_makes_the_other_raise_within_xrays_timeout(tmp_path):
    # Xray()'s tracing forward runs FSDP's all-gathers, which wait with the process group's timeout (30 s
    # here); the ranks first meet in Xray's own collective, which gives up after collective_timeout (3 s).
    rank0, rank1 = run_ranks("late_start", tmp_path)
    assert "construction collective at step 0" in rank0["error"] and "waited more than 3 s" in rank0["error"]
    assert "Every rank must create its Xray at the same point" in rank0["error"]
    assert rank0["construct_seconds"] < 8  # the timeout ended it, not rank 1's arrival
    assert "construction collective" in rank1["error"]  # rank 1 came late and found no one either
