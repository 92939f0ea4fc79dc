"""Damaged and hostile event files: open_run skips what is damaged, warns once with the file and the
byte offset, and reads every other capture with its exact values; a step written twice reads as
its last write; a healthy run beside a damaged one stays visible in the plugin on both loaders."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import sys
import time
import urllib.error
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.compat.proto import event_pb2
from torch import nn
from torch.nn import functional as F

from tb_plugin import frame_stats, metadata
from tests.damaged_files import DAMAGES, FOOTER, HEADER, damage_file, pack_record, record_spans, with_payload
from tests.tensorboard_server import get_json, tensorboard
from xray_tb import Xray
from xray_tb.io.reader import last_recorded_step, open_run
from xray_tb.io.records import DamagedEventFileWarning, RecordReader

PLAN = {"0": {"weight": True, "output": True, "grad": True}, "3": {"weight": True, "activation": True}}
STEPS = list(range(6))
DAMAGED_STEP = 2
DEEP_JSON = b"[" * 100_000  # parsing it raises RecursionError, not ValueError


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3), nn.Tanh())


def record(logdir: Path, steps, net: nn.Module, plan=PLAN, seed: int = 0, set_plan_at=None) -> dict:
    """Train ``net`` for ``steps``, capturing each; what each capture held, read from Xray's memory:
    ``{step: {(layer, kind): (values, header)}}``."""
    g = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    truth = {}
    with Xray(net, input_size=(1, 8, 8), logdir=str(logdir), plan=plan) as xray:
        for step in steps:
            if step == set_plan_at:
                xray.set_plan(plan)
            x, y = torch.randn(5, 1, 8, 8, generator=g), torch.randint(0, 3, (5,), generator=g)
            optimizer.zero_grad()
            F.cross_entropy(net(x), y).backward()
            xray.take_graphs(step)
            recorded = [(layer, kind) for layer, kinds in xray.records().items() for kind in kinds]
            truth[step] = {(layer, kind): xray.load(layer, kind, step) for layer, kind in recorded}
            optimizer.step()
    return truth


@dataclasses.dataclass
class Recording:
    name: str  # the event file's name
    data: bytes  # its bytes, healthy
    spans: list[tuple[int, int]]  # (start, end) of every record
    captures: dict[int, int]  # step → index of the record holding its capture
    truth: dict


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Recording:
    logdir = tmp_path_factory.mktemp("healthy")
    truth = record(logdir, STEPS, model())
    (path,) = logdir.glob("events.out.tfevents.*")
    data = path.read_bytes()
    spans = record_spans(data)
    captures = {}
    for index, (start, end) in enumerate(spans):
        event = event_pb2.Event.FromString(data[start + HEADER : end - FOOTER])
        if any(value.tag.startswith(metadata.FRAME_TAG_PREFIX) for value in event.summary.value):
            captures[event.step] = index
    assert sorted(captures) == STEPS
    return Recording(path.name, data, spans, captures, truth)


def ending_with_the_last_capture(recording: Recording) -> Recording:
    """The recording cut after its last capture's record (Xray writes other records after it)."""
    last = recording.captures[STEPS[-1]]
    return dataclasses.replace(recording, data=recording.data[: recording.spans[last][1]], spans=recording.spans[: last + 1])


def write_run(directory: Path, recording: Recording, data: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / recording.name
    path.write_bytes(data)
    return path


def open_run_warnings(directory: Path):
    """``open_run(directory)`` and the messages of the damage warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = open_run(directory)
    return run, [str(w.message) for w in caught if issubclass(w.category, DamagedEventFileWarning)]


def assert_read_exactly(run, truth: dict, steps, missing=()) -> None:
    """The run holds exactly the captures of ``steps`` (less the ``(layer, kind, step)`` in
    ``missing``), each with the values and header the recorder captured."""
    expected: dict = {}
    for step in steps:
        for layer, kind in truth[step]:
            if (layer, kind, step) not in missing:
                expected.setdefault(layer, {}).setdefault(kind, []).append(step)
    assert run.records() == expected
    for step in steps:
        for (layer, kind), (values, header) in truth[step].items():
            if (layer, kind, step) in missing:
                continue
            read_values, read_header = run.load(layer, kind, step)
            assert torch.equal(read_values, values), (layer, kind, step)
            assert read_header == header


# Damaged records -----------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_record_is_skipped_and_every_other_capture_read_exactly(tmp_path, recording, damage):
    path = write_run(tmp_path / "run", recording, recording.data)
    start = damage_file(path, damage, recording.captures[DAMAGED_STEP])
    run, messages = open_run_warnings(tmp_path / "run")
    assert_read_exactly(run, recording.truth, [step for step in STEPS if step != DAMAGED_STEP])
    assert len(messages) == 1 and str(path) in messages[0] and f"record at byte {start}" in messages[0]
    healthy = open_run(write_run(tmp_path / "healthy", recording, recording.data).parent)
    assert run.architecture == healthy.architecture and run.plan == healthy.plan
    run.reload()  # nothing new: no second warning, nothing lost
    assert_read_exactly(run, recording.truth, [step for step in STEPS if step != DAMAGED_STEP])


def test_each_damaged_record_is_warned_once(tmp_path, recording):
    path = write_run(tmp_path / "run", recording, recording.data)
    first = damage_file(path, "flipped payload byte", recording.captures[1])
    second = damage_file(path, "zeroed record", recording.captures[3])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = open_run(tmp_path / "run")
        run.reload()
        run.reload()
    messages = [str(w.message) for w in caught if issubclass(w.category, DamagedEventFileWarning)]
    assert [f"record at byte {first}" in messages[0], f"record at byte {second}" in messages[1]] == [True, True]
    assert len(messages) == 2
    assert_read_exactly(run, recording.truth, [0, 2, 4, 5])


SCAN_CHUNK = 1 << 20  # positions the reader examines at once when looking for the next record


@pytest.mark.parametrize("filler", ["random", "zeros", "text"])
@pytest.mark.parametrize(
    "gap", [5, SCAN_CHUNK - 5, SCAN_CHUNK + 1, 3 * SCAN_CHUNK], ids=["5 B", "chunk-5", "chunk+1", "3 MiB"]
)
def test_reading_resumes_after_a_stretch_of_garbage(tmp_path, recording, gap, filler):
    start, _ = recording.spans[recording.captures[DAMAGED_STEP]]
    garbage = {
        "random": np.random.default_rng(0).bytes(gap),
        "zeros": bytes(gap),
        "text": (b"no record here " * gap)[:gap],
    }[filler]
    path = write_run(tmp_path / "run", recording, recording.data[:start] + garbage + recording.data[start:])
    run, messages = open_run_warnings(tmp_path / "run")
    assert_read_exactly(run, recording.truth, STEPS)
    assert len(messages) == 1 and messages[0].startswith(f"event file {path}: damaged record at byte {start} (")
    assert messages[0].endswith(f"skipped {gap} bytes and read on from byte {start + gap}")


@pytest.mark.parametrize("damage", ["flipped data crc", "flipped payload byte", "valid-crc garbage payload"])
def test_a_complete_damaged_last_record_is_skipped_with_a_warning(tmp_path, recording, damage):
    recording = ending_with_the_last_capture(recording)
    path = write_run(tmp_path / "run", recording, recording.data)
    start = damage_file(path, damage, recording.captures[STEPS[-1]])
    run, messages = open_run_warnings(tmp_path / "run")
    assert_read_exactly(run, recording.truth, STEPS[:-1])
    assert len(messages) == 1 and str(path) in messages[0] and f"byte {start}" in messages[0]


@pytest.mark.parametrize("damage", ["1 TiB length, valid header crc", "zeroed record", "flipped length byte"])
def test_a_last_record_that_may_still_be_written_is_left_for_later(tmp_path, recording, damage):
    """Nothing after it verifies, so it may be a record being written: no warning, no allocation of
    what its length claims; every capture before it is read."""
    recording = ending_with_the_last_capture(recording)
    path = write_run(tmp_path / "run", recording, recording.data)
    damage_file(path, damage, recording.captures[STEPS[-1]])
    run, messages = open_run_warnings(tmp_path / "run")
    assert messages == []
    assert_read_exactly(run, recording.truth, STEPS[:-1])


# Valid records whose payload does not decode ----------------------------------------------------------


def rewrite_capture(recording: Recording, step: int, change) -> tuple[bytes, int]:
    """The healthy file with the capture of ``step`` changed by ``change(event)``, checksums valid;
    and the start of that record."""
    start, end = recording.spans[recording.captures[step]]
    event = event_pb2.Event.FromString(recording.data[start + HEADER : end - FOOTER])
    change(event)
    return with_payload(recording.data, start, end, event.SerializeToString()), start


def frame_value(event: event_pb2.Event, layer: str, kind: str):
    return next(value for value in event.summary.value if value.tag == metadata.frame_tag(layer, kind))


def set_blob(layer: str, kind: str, index: int, blob: bytes):
    return lambda event: frame_value(event, layer, kind).tensor.string_val.__setitem__(index, blob)


def truncate_values(event):
    blobs = frame_value(event, "0", "output").tensor.string_val
    blobs[1] = blobs[1][:-4]


def drop_values(event):
    value = frame_value(event, "0", "output")
    del value.tensor.string_val[1]


def object_values(event):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|O", "fortran_order": False, "shape": (1,)})
    frame_value(event, "0", "output").tensor.string_val[1] = header.getvalue() + bytes(8)


@pytest.mark.parametrize(
    "change, reason",
    [
        (set_blob("0", "output", 0, b"{not json"), "its header is not a frame header"),
        (set_blob("0", "output", 0, b'["a", "list"]'), "its header is not a frame header"),
        (set_blob("0", "output", 0, b'{"layer": "0"}'), "its header is not a frame header"),
        (set_blob("0", "output", 0, DEEP_JSON), "its header is not a frame header"),
        (set_blob("0", "output", 1, b"not an npy array"), "its values are not an .npy array"),
        (truncate_values, "its values hold"),
        (drop_values, "a frame has 2 blobs, this one 1"),
        (object_values, "not numbers"),
    ],
    ids=[
        "header not json", "header a list", "header incomplete", "header nested too deep",
        "values not npy", "values truncated", "one blob", "object dtype",
    ],
)
def test_a_frame_that_does_not_decode_is_skipped_and_the_rest_of_its_capture_read(tmp_path, recording, change, reason):
    data, start = rewrite_capture(recording, DAMAGED_STEP, change)
    path = write_run(tmp_path / "run", recording, data)
    run, messages = open_run_warnings(tmp_path / "run")
    assert_read_exactly(run, recording.truth, STEPS, missing={("0", "output", DAMAGED_STEP)})
    assert len(messages) == 1
    where = f"event file {path}: record at byte {start}: step {DAMAGED_STEP}"
    assert messages[0].startswith(f"{where}: skipped 'xray/frame/0/output'")
    assert reason in messages[0]


def test_a_statistic_or_document_that_does_not_decode_is_skipped(tmp_path, recording):
    def break_stat_and_add_bad_plan(event):
        stat = next(value for value in event.summary.value if value.tag == frame_stats.FRAME_STATS_TAG)
        header, _ = frame_stats.parts(list(stat.tensor.string_val))  # its matrix replaced
        stat.tensor.string_val[0] = frame_stats.one_blob(header, b"not npy")
        event.summary.MergeFrom(metadata.json_summary(metadata.PLAN_TAG, {}))
        event.summary.value[-1].tensor.string_val[0] = b"{not json"

    data, start = rewrite_capture(recording, DAMAGED_STEP, break_stat_and_add_bad_plan)
    write_run(tmp_path / "run", recording, data)
    run, messages = open_run_warnings(tmp_path / "run")
    assert_read_exactly(run, recording.truth, STEPS)
    assert len(messages) == 1 and f"record at byte {start}" in messages[0]
    assert "'xray/frame_stats' (not frame statistics)" in messages[0] and "'xray/meta/plan' (not JSON)" in messages[0]
    healthy = open_run(write_run(tmp_path / "healthy", recording, recording.data).parent)
    assert run.plan == healthy.plan  # the earlier, readable plan stays current
    pytest.importorskip("pandas")
    table, healthy_table = (r.to_pandas().set_index(["step", "layer", "kind"]) for r in (run, healthy))
    assert DAMAGED_STEP not in table.index.get_level_values("step")  # that capture's statistics alone are lost
    assert table.equals(healthy_table.drop(index=DAMAGED_STEP, level="step"))


@pytest.mark.parametrize(
    "document, reason",
    [(b'{"nodes": [{"module": ["a list"]}]}', "its nodes are not a list of nodes"), (DEEP_JSON, "not JSON")],
)
def test_an_architecture_that_is_not_one_is_skipped(tmp_path, recording, document, reason):
    start, end = recording.spans[1]
    event = event_pb2.Event.FromString(recording.data[start + HEADER : end - FOOTER])
    assert event.summary.value[0].tag == metadata.ARCHITECTURE_TAG
    event.summary.value[0].tensor.string_val[0] = document
    write_run(tmp_path / "run", recording, with_payload(recording.data, start, end, event.SerializeToString()))
    run, messages = open_run_warnings(tmp_path / "run")
    assert run.architecture is None and len(messages) == 1 and reason in messages[0]
    assert_read_exactly(run, recording.truth, STEPS)


def hostile_plugin_content(event):
    """The first frame's tag description nested too deep to parse: readers skip the value as not theirs."""
    frame_value(event, "0", "weight").metadata.plugin_data.content = DEEP_JSON


def test_a_tag_description_nested_too_deep_skips_only_its_value(tmp_path, recording):
    data, _ = rewrite_capture(recording, 0, hostile_plugin_content)
    write_run(tmp_path / "run", recording, data)
    assert_read_exactly(open_run(tmp_path / "run"), recording.truth, STEPS, missing={("0", "weight", 0)})


# A file still being written -------------------------------------------------------------------------------


@pytest.mark.parametrize("cut", ["in the length", "in the length checksum", "in the data", "in the data checksum"])
def test_a_record_still_being_written_is_read_once_complete(tmp_path, recording, cut):
    start, end = recording.spans[recording.captures[4]]
    at = {
        "in the length": start + 5,
        "in the length checksum": start + 10,
        "in the data": (start + end) // 2,
        "in the data checksum": end - 2,
    }[cut]
    path = write_run(tmp_path / "run", recording, recording.data[:at])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not damage: no warning
        run = open_run(tmp_path / "run")
        assert_read_exactly(run, recording.truth, [0, 1, 2, 3])
        with open(path, "ab") as file:
            file.write(recording.data[at:])
        run.reload()
    assert_read_exactly(run, recording.truth, STEPS)


def test_a_reader_reads_only_what_was_appended(tmp_path, recording):
    path = write_run(tmp_path / "run", recording, recording.data)
    reader = RecordReader(path)
    assert [record.offset for record in reader.read()] == [start for start, _ in recording.spans]
    assert reader.offset == len(recording.data) and list(reader.read()) == []
    with open(path, "ab") as file:
        file.write(pack_record(b"appended"))
    appended = list(reader.read())
    assert [(record.offset, record.data) for record in appended] == [(len(recording.data), b"appended")]
    path.write_bytes(recording.data[:100])  # replaced by a shorter file: nothing new, no error
    assert list(reader.read()) == [] and reader.skipped == []


# Duplicate steps ------------------------------------------------------------------------------------------------


def test_a_run_resumed_into_the_same_folder_reads_the_last_write_of_each_step(tmp_path):
    """A crashed run restarted from a checkpoint of step 2: its new Xray writes a second event file in
    the same folder, and steps 3 and 4 twice. Each step reads as its last write, and the new Xray's
    plan is current although the old one wrote a later plan version."""
    net = model()
    first = record(tmp_path / "run", range(5), net, set_plan_at=1)
    resumed_plan = {**PLAN, "3": {"weight": True, "bias": True}}
    second = record(tmp_path / "run", range(3, 7), net, plan=resumed_plan, seed=1)
    files = sorted((tmp_path / "run").glob("events.out.tfevents.*"))
    assert len(files) == 2

    run, messages = open_run_warnings(tmp_path / "run")
    assert messages == []
    truth = {step: {**first.get(step, {}), **second.get(step, {})} for step in range(7)}
    assert ("3", "activation") in truth[4] and ("3", "bias") in truth[4]  # the first run's, kept: not written again
    assert_read_exactly(run, truth, range(7))
    assert not torch.equal(first[3][("0", "weight")][0], second[3][("0", "weight")][0])
    assert run.plan["3"]["bias"] is True and run.plan["3"]["activation"] is False
    assert last_recorded_step(tmp_path / "run") == 6

    pandas = pytest.importorskip("pandas")
    alone = []
    for index, path in enumerate(files):
        (tmp_path / f"alone{index}").mkdir()
        shutil.copy(path, tmp_path / f"alone{index}")
        alone.append(open_run(tmp_path / f"alone{index}").to_pandas().set_index(["step", "layer", "kind"]))
    combined = run.to_pandas().set_index(["step", "layer", "kind"])
    pandas.testing.assert_frame_equal(combined.sort_index(), alone[1].combine_first(alone[0]).sort_index())


def test_a_step_written_twice_in_one_file_reads_as_the_second_write(tmp_path):
    net = model()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="take_graphs", category=UserWarning)
        with Xray(net, input_size=(1, 8, 8), logdir=str(tmp_path / "run"), plan={"3": {"weight": True}}) as xray:
            xray.take_graphs(1)
            with torch.no_grad():
                net[3].weight.add_(1.0)
            xray.take_graphs(1)
            second = xray.load("3", "weight", 1)
    run = open_run(tmp_path / "run")
    assert run.records() == {"3": {"weight": [1]}}
    assert torch.equal(run.load("3", "weight", 1)[0], second[0]) and run.load("3", "weight", 1)[1] == second[1]


def test_last_recorded_step(tmp_path, recording):
    assert last_recorded_step(tmp_path / "missing") is None
    Xray(model(), input_size=(1, 8, 8), logdir=str(tmp_path / "no_capture"), plan=PLAN).close()
    assert last_recorded_step(tmp_path / "no_capture") is None  # an architecture and a plan, no frame
    record(tmp_path / "restarted", range(10), model())
    record(tmp_path / "restarted", range(3, 5), model())
    assert last_recorded_step(tmp_path / "restarted") == 9  # the highest, not the latest written
    recording = ending_with_the_last_capture(recording)
    path = write_run(tmp_path / "damaged", recording, recording.data)
    damage_file(path, "valid-crc garbage payload", recording.captures[3])
    damage_file(path, "zeroed record", recording.captures[STEPS[-1]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # quiet
        assert last_recorded_step(tmp_path / "damaged") == STEPS[-2]


# The plugin, on TensorBoard's two loaders ----------------------------------------------------------------------

SURVIVED = ["flipped data crc", "flipped payload byte", "flipped length byte", "zeroed record"]


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["rust", "python"])
def test_a_damaged_run_does_not_hide_a_healthy_one_in_the_plugin(tmp_path, recording, loader):
    """Damage of the kinds both loaders survive, and a hostile tag description on the first record of
    a tag: every run is listed, the healthy one whole, each damaged one at least up to its damaged
    record (the Python loader stops there)."""
    logs = tmp_path / "logs"
    write_run(logs / "healthy", recording, recording.data)
    write_run(logs / "damaged_hostile_tag_description", recording, rewrite_capture(recording, 0, hostile_plugin_content)[0])
    runs = {"damaged_hostile_tag_description": "hostile tag description"}
    for damage in SURVIVED:
        name = "damaged_" + damage.replace(" ", "_")
        damage_file(write_run(logs / name, recording, recording.data), damage, recording.captures[DAMAGED_STEP])
        runs[name] = damage
    extra = ["--load_fast=false"] if loader == "python" else []
    with tensorboard(sys.executable, logs, cwd=tmp_path, extra=extra) as url:
        listed, healthy, damaged = served_once_loaded(url, list(runs))
    assert listed == sorted(["healthy", *runs])
    assert healthy["steps"] == STEPS
    assert {layer["name"]: layer["kinds"] for layer in healthy["layers"]} == {
        "0": {"weight": STEPS, "output": STEPS, "grad": STEPS},
        "3": {"weight": STEPS, "activation": STEPS},
    }
    for name, body in damaged.items():
        assert body["steps"][:DAMAGED_STEP] == STEPS[:DAMAGED_STEP], name


def served_once_loaded(url: str, damaged_runs: list[str], patience: float = 30.0):
    """``/runs``, ``/layers`` of the healthy run and of each damaged run, asked again until every run
    is listed with the steps expected of it (TensorBoard loads runs in the background), or
    ``patience`` seconds have passed: then the last answers, for the assertions to show."""
    deadline = time.monotonic() + patience
    while True:
        listed = get_json(f"{url}/data/plugin/xray/runs")["runs"]
        healthy = get_json(f"{url}/data/plugin/xray/layers?run=healthy") if "healthy" in listed else {"steps": []}
        damaged = {name: get_json(f"{url}/data/plugin/xray/layers?run={name}") for name in damaged_runs if name in listed}
        loaded = len(damaged) == len(damaged_runs) and all(len(body["steps"]) >= DAMAGED_STEP for body in damaged.values())
        if (loaded and healthy["steps"] == STEPS) or time.monotonic() > deadline:
            return listed, healthy, damaged
        time.sleep(0.3)


@pytest.mark.slow
def test_a_flipped_value_byte_is_never_served_as_a_value_by_the_fast_loader(tmp_path, recording):
    """The Rust loader serves a record without checking its data checksum; the frame's own checksum
    makes /frame answer 422 instead of a wrong value, and open_run skips the record."""
    start, end = recording.spans[recording.captures[DAMAGED_STEP]]
    data = bytearray(recording.data)
    values_at = data.index(b"\x93NUMPY", start, end)  # the first frame's values in that capture
    data[values_at + 140] ^= 0x01  # inside its float32 values, past the .npy header
    write_run(tmp_path / "logs" / "flipped", recording, bytes(data))
    layer, kind = next((layer, kind) for layer, kinds in PLAN.items() for kind, on in kinds.items() if on)
    with tensorboard(sys.executable, tmp_path / "logs", cwd=tmp_path) as url:
        base = f"{url}/data/plugin/xray/frame?run=flipped&layer={layer}&kind={kind}"
        deadline = time.monotonic() + 30
        while "flipped" not in get_json(f"{url}/data/plugin/xray/runs")["runs"] and time.monotonic() < deadline:
            time.sleep(0.3)
        with pytest.raises(urllib.error.HTTPError) as answer:
            get_json(f"{base}&step={DAMAGED_STEP}")
        body = json.loads(answer.value.read())
        assert answer.value.code == 422 and "damaged (checksum mismatch)" in body["error"] and "--load_fast=false" in body["error"]
        healthy = get_json(f"{base}&step={DAMAGED_STEP + 1}")
        assert healthy["step"] == DAMAGED_STEP + 1
    with pytest.warns(DamagedEventFileWarning):
        run = open_run(tmp_path / "logs" / "flipped")
    assert DAMAGED_STEP not in run.records()[layer][kind]
