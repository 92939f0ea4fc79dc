"""open_run reads back exactly what the recorder wrote, and says what exists when asked for what does not."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter
from torch import nn
from torch.nn import functional as F

from tb_plugin import metadata
from xray_tb import RandomFilters, Xray
from xray_tb.io.reader import open_run

PLAN = {"zconv": {"weight": True, "weight_grad": True, "output": True, "grad": True}, "alinear": {"weight": True}}
STEPS = [0, 10, 20]


def small_model() -> nn.Sequential:
    torch.manual_seed(0)
    # Architecture order (zconv, alinear) is the reverse of name order, to see which one records() follows.
    return nn.Sequential(
        OrderedDict(zconv=nn.Conv2d(1, 4, 3), relu=nn.ReLU(), flatten=nn.Flatten(), alinear=nn.Linear(4 * 6 * 6, 3))
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A run of three SGD steps, and the tensors the recorder saw at each step: {step: {(layer, kind): full tensor}}."""
    logdir = tmp_path_factory.mktemp("run")
    model = small_model()
    x, y = torch.randn(5, 1, 8, 8), torch.tensor([0, 1, 2, 0, 1])
    seen: dict[str, torch.Tensor] = {}

    def keep_output(module, inputs, output):
        if output.requires_grad:  # not in Xray's tracing forward
            output.retain_grad()
            seen["output"] = output

    model.zconv.register_forward_hook(keep_output)
    xray = Xray(model, x, logdir=str(logdir), plan=PLAN, selector=RandomFilters(max_filters=2, max_rows=2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    truth = {}
    for step in STEPS:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        xray.take_graphs(step)
        truth[step] = {
            ("zconv", "weight"): model.zconv.weight.detach().clone(),
            ("zconv", "weight_grad"): model.zconv.weight.grad.clone(),
            ("zconv", "output"): seen["output"].detach().clone(),
            ("zconv", "grad"): seen["output"].grad.clone(),
            ("alinear", "weight"): model.alinear.weight.detach().clone(),
        }
        optimizer.step()
    xray.close()
    return open_run(logdir), truth


def expected_values(full: torch.Tensor, header: metadata.FrameHeader) -> torch.Tensor:
    view = full if header.batch_index is None else full[header.batch_index]
    return view[header.indices]


def test_records_are_what_was_captured_in_architecture_order(recorded):
    run, _ = recorded
    records = run.records()
    assert list(records) == ["zconv", "alinear"]
    assert records == {
        "zconv": {"weight": STEPS, "weight_grad": STEPS, "output": STEPS, "grad": STEPS},
        "alinear": {"weight": STEPS},
    }
    assert list(records["zconv"]) == ["weight", "weight_grad", "output", "grad"]
    assert run.plan["alinear"]["weight"] is True and run.plan["zconv"]["activation"] is False
    assert any(node.get("module") == "zconv" for node in run.architecture["nodes"])


def test_load_equals_the_tensors_at_the_recorded_indices(recorded):
    run, truth = recorded
    for step in STEPS:
        for (layer, kind), full in truth[step].items():
            values, header = run.load(layer, kind, step)
            assert (header.layer, header.kind, header.step) == (layer, kind, step)
            assert header.original_shape == list(full.shape) and len(header.indices) == 2
            assert values.dtype == torch.float32
            torch.testing.assert_close(values, expected_values(full, header))
    # The weights changed between steps, so each step's frame is its own.
    assert not torch.equal(run.load("zconv", "weight", 0)[0], run.load("zconv", "weight", 20)[0])


def test_frames_are_in_step_order(recorded):
    run, _ = recorded
    frames = run.frames("zconv", "grad")
    assert [header.step for _, header in frames] == STEPS
    torch.testing.assert_close(frames[1][0], run.load("zconv", "grad", 10)[0])


@pytest.mark.parametrize(
    "args, message",
    [
        (("zcnov", "weight", 0), "has no layer 'zcnov' (did you mean 'zconv'?); recorded layers: zconv, alinear"),
        (("relu", "weight", 0), "has no layer 'relu'; recorded layers: zconv, alinear"),
        (("zconv", "weights", 0), "unknown kind 'weights'; valid kinds: weight, weight_grad, bias, bias_grad, output, activation, grad"),
        (("alinear", "output", 0), "layer 'alinear' has no 'output' frames; recorded kinds: weight"),
        (("zconv", "weight", 5), "'zconv' 'weight' was not recorded at step 5; recorded steps: [0, 10, 20]"),
    ],
)
def test_bad_names_say_what_was_recorded(recorded, args, message):
    run, _ = recorded
    with pytest.raises(ValueError) as error:
        run.load(*args)
    assert message in str(error.value)


def test_a_step_that_is_no_number_and_a_run_that_is_no_path_are_named(recorded):
    run, _ = recorded
    with pytest.raises(TypeError, match=r"step= is a recorded step, a whole number; got str '10'"):
        run.load("zconv", "weight", "10")
    assert run.load("zconv", "weight", np.int64(10))[1].step == 10  # numpy's integers are whole numbers too
    with pytest.raises(TypeError, match=r"open_run\(\) takes a run directory, a str or path .*; got int 5"):
        open_run(5)


@pytest.mark.parametrize("call, message", [
    (lambda run: run.load(None, "weight", 0), "layer= is a layer name such as 'conv1', a string; got NoneType None"),
    (lambda run: run.load(["zconv"], "weight", 0), "layer= is a layer name such as 'conv1', a string; got list ['zconv']"),
    (lambda run: run.frames("zconv", 3), "kind= is one of weight, "),
    (lambda run: run.health(None), "stat= is a statistic name such as 'grad_l2', a string; got NoneType None"),
    (lambda run: run.health("grad_l2", present="yes"), "health(present=...) takes True or False, got 'yes'"),
])
def test_a_name_that_is_no_string_is_named_before_any_lookup(recorded, call, message):
    run, _ = recorded  # before, difflib's own TypeError ('NoneType' object is not iterable) came out
    with pytest.raises(TypeError) as error:
        call(run)
    assert message in str(error.value)


def test_frames_checks_names_like_load(recorded):
    run, _ = recorded
    with pytest.raises(ValueError, match="did you mean 'zconv'"):
        run.frames("zcnov", "weight")


def test_to_pandas_statistics_are_over_the_full_tensor(recorded):
    pytest.importorskip("pandas")
    run, truth = recorded
    table = run.to_pandas()
    assert list(table.columns) == ["step", "wall_time", "layer", "kind", *metadata.STATS]
    order = [(step, layer, kind) for step in STEPS for layer, kinds in run.records().items() for kind in kinds]
    assert list(zip(table.step, table.layer, table.kind, strict=True)) == order
    for row in table.itertuples():
        full = truth[row.step][(row.layer, row.kind)]
        expected = [float(v) for v in (full.mean(), full.std(), full.min(), full.max())]
        np.testing.assert_allclose([row.mean, row.std, row.min, row.max], expected, rtol=1e-5, atol=1e-7)
        assert row.nonfinite == 0
        assert row.wall_time == run.load(row.layer, row.kind, row.step)[1].wall_time


# Runs written by hand, for what the recorder does not do on its own ---------------------------------


def write_events(path, *events: tuple[int, summary_pb2.Summary]) -> None:
    """An event file at ``path`` holding ``(step, summary)`` events, wall time = step."""
    with open(path, "wb") as file:
        writer = RecordWriter(file)
        writer.write(event_pb2.Event(wall_time=0.0, file_version="brain.Event:2").SerializeToString())
        for step, summary in events:
            writer.write(event_pb2.Event(step=step, wall_time=float(step), summary=summary).SerializeToString())


def frame(step: int, fill: float, layer: str = "fc", kind: str = "weight") -> summary_pb2.Summary:
    header = metadata.FrameHeader("run", layer, kind, step, float(step), [2, 3], "float32", 0, [0, 1], None, "FirstN()")
    return summary_pb2.Summary(value=[metadata.frame_value(header, np.full((2, 3), fill, dtype=np.float32))])


def test_later_writes_win_across_event_files_in_name_order(tmp_path):
    stats = summary_pb2.Summary(value=metadata.stats_values("fc", "weight", {"mean": 1.0, "max": 2.0}))
    write_events(
        tmp_path / "events.out.tfevents.1.a", (0, frame(0, 1.0)), (1, frame(1, 1.0)), (1, frame(1, 2.0)), (1, stats)
    )
    rewritten = summary_pb2.Summary(value=metadata.stats_values("fc", "weight", {"mean": 3.0}))
    write_events(tmp_path / "events.out.tfevents.2.b", (1, frame(1, 3.0)), (1, rewritten))
    run = open_run(tmp_path)
    assert run.records() == {"fc": {"weight": [0, 1]}}
    assert run.load("fc", "weight", 0)[0].tolist() == [[1.0] * 3] * 2
    assert run.load("fc", "weight", 1)[0].tolist() == [[3.0] * 3] * 2
    pytest.importorskip("pandas")
    row = run.to_pandas().iloc[0]
    assert (row.step, row["mean"], row["max"]) == (1, 3.0, 2.0) and np.isnan(row["std"])


def test_the_document_written_last_is_current_and_reload_sees_new_files(tmp_path):
    write_events(
        tmp_path / "events.out.tfevents.1",
        (1, metadata.json_summary(metadata.PLAN_TAG, {"old": {}})),
        (0, metadata.json_summary(metadata.PLAN_TAG, {"fc": {"weight": True}})),  # a second Xray on the same writer
        (0, frame(0, 1.0)),
    )
    run = open_run(tmp_path)
    assert run.plan == {"fc": {"weight": True}} and run.architecture is None
    write_events(tmp_path / "events.out.tfevents.2", (5, frame(5, 1.0, kind="output")))
    assert run.records() == {"fc": {"weight": [0]}}
    run.reload()
    assert run.records() == {"fc": {"weight": [0], "output": [5]}}


def test_other_plugins_and_newer_versions_are_skipped(tmp_path):
    foreign = frame(0, 1.0)
    foreign.value[0].metadata.plugin_data.plugin_name = "images"
    newer = frame(1, 1.0)
    newer.value[0].metadata.plugin_data.content = b'{"version": 2, "type": "frame"}'
    write_events(tmp_path / "events.out.tfevents.1", (0, foreign), (1, newer), (2, frame(2, 1.0)))
    assert open_run(tmp_path).records() == {"fc": {"weight": [2]}}


def test_many_steps_error_lists_the_nearest(tmp_path):
    write_events(tmp_path / "events.out.tfevents.1", *[(step, frame(step, 0.0)) for step in range(0, 100, 5)])
    message = r"step 42; nearest recorded steps: \[35, 40, 45, 50\] \(20 steps from 0 to 95\)"
    with pytest.raises(ValueError, match=message):
        open_run(tmp_path).load("fc", "weight", 42)


def test_a_directory_without_event_files_lists_the_runs_below(tmp_path):
    for run in ("b/c", "a"):
        (tmp_path / run).mkdir(parents=True)
        (tmp_path / run / "events.out.tfevents.1").write_bytes(b"")
    with pytest.raises(ValueError, match="holds no event file but 2 run directories below it do: a, b/c; open one"):
        open_run(tmp_path)
    with pytest.raises(NotADirectoryError, match="is a file, not a run directory"):  # it said "no such run directory"
        open_run(tmp_path / "a" / "events.out.tfevents.1")
    for index in range(12):
        (tmp_path / f"many/r{index:02d}").mkdir(parents=True)
        (tmp_path / f"many/r{index:02d}/events.out.tfevents.1").write_bytes(b"")
    with pytest.raises(ValueError, match=r"but 12 run directories below it do: r00, .*, r09, and 2 more; open one"):
        open_run(tmp_path / "many")  # a logdir of hundreds of runs no longer lists them all
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"holds no event file \(events\.out\.tfevents\.\*\), nor does any folder"):
        open_run(tmp_path / "empty")
    with pytest.raises(FileNotFoundError):
        open_run(tmp_path / "missing")
