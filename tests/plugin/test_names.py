"""Odd layer, tensor and run names, recorded by the real recorder, served by real TensorBoard on both loaders."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from torch import nn

from tb_plugin import metadata, run_names
from tests.event_files import read_xray_events
from tests.plugin import http_client
from tests.helpers.plugin_app import get as get_in_process
from tests.helpers.plugin_app import serve
from xray_tb import Xray

#: A submodule name with every character a tag cannot hold as it is, and a literal "%41".
ODD_LAYER = 'odd "q" \\ tab\there\nnew/line 50%41 ü€😀'
KEYS = ("it's", 'say "\\hi\\"')
HEAD_NAMES = [f"head[{key!r}]" for key in KEYS]  # head["it's"], head['say "\\hi\\"']
STEPS = (0, 1, 2)
PLAIN_RUN = "run"
WORKING_RUN = "ü 50% run, (v2) #1 & 'x' ?;=+*<>|{}[]$~`^\x7f€😀"  # odd but readable by both loaders
#: Run folders that TensorBoard's fast loader cannot read, with the character it stumbles on.
UNREADABLE_RUNS = {'say "hi"': '"', "tab\there": "\t", "back\\slash": "\\"}


class DictHead(nn.Module):
    """A leaf module whose output is a dict with odd keys."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 3))

    def forward(self, x):
        y = x @ self.weight
        return {KEYS[0]: y, KEYS[1]: -2 * y}


class OddNames(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module(ODD_LAYER, nn.Linear(4, 4))
        self.head = DictHead()

    def forward(self, x):
        return self.head(getattr(self, ODD_LAYER)(x))[KEYS[0]]


def record_odd_names(logdir) -> OddNames:
    torch.manual_seed(0)
    model = OddNames()
    plan = {ODD_LAYER: {"weight": True, "output": True}, "head": {"output": True}}
    with Xray(model, input_size=(4,), logdir=str(logdir), plan=plan) as xray:
        for step in STEPS:
            model(torch.randn(2, 4)).sum().backward()
            xray.take_graphs(step)
    return model


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("names")
    record_odd_names(root / PLAIN_RUN)
    for run in (WORKING_RUN, *UNREADABLE_RUNS):
        record_odd_names(root / run)
    return root


def test_encoded_names_round_trip_and_hold_no_character_a_tag_cannot_carry():
    generator = random.Random(0)
    pool = 'ab%"\\\t\n\r\x00\x7f/ü€😀\ud800 []\'.41'
    names = [ODD_LAYER, *HEAD_NAMES] + ["".join(generator.choice(pool) for _ in range(generator.randint(1, 16))) for _ in range(5000)]
    for name in names:
        encoded = metadata.encode_name(name)
        assert metadata.decode_name(encoded) == name
        assert not run_names.fast_loader_unsafe(encoded) and "/" not in encoded
        assert metadata.parse_frame_tag(metadata.frame_tag(name, "grad")) == (name, "grad")
        assert metadata.parse_stat_tag(metadata.stat_tag(name, "output", "std")) == (name, "output", "std")
    assert metadata.encode_name("conv1") == "conv1" and metadata.encode_name("head['logits']") == "head['logits']"


@pytest.mark.slow
def test_layers_lists_the_real_names(server):
    loader, url = server
    for run in (PLAIN_RUN, WORKING_RUN):
        status, body = http_client.get(url, "/layers", run=run)
        assert status == 200, (loader, body)
        assert [(layer["name"], layer["type"]) for layer in body["layers"]] == [(ODD_LAYER, "Linear")] + [(name, "DictHead") for name in HEAD_NAMES]
        assert body["steps"] == list(STEPS)


@pytest.mark.slow
def test_frame_of_every_odd_name_holds_the_recorded_values(server, logdir):
    loader, url = server
    frames, _ = read_xray_events(str(logdir / PLAIN_RUN))
    assert {(layer, kind) for layer, kind, _ in frames} == {(ODD_LAYER, "weight"), (ODD_LAYER, "output"), *((name, "output") for name in HEAD_NAMES)}
    for (layer, kind, step), (header, values) in frames.items():
        status, body = http_client.get(url, "/frame", run=PLAIN_RUN, layer=layer, kind=kind, step=step)
        assert status == 200, (loader, layer, body)
        assert body["layer"] == layer == header.name and body["step"] == step
        np.testing.assert_array_equal(np.concatenate([p.ravel() for p in http_client.panels(body)]), values.ravel())
    status, it_s = http_client.get(url, "/frame", run=PLAIN_RUN, layer=HEAD_NAMES[0], kind="output", step=1)
    status, say = http_client.get(url, "/frame", run=PLAIN_RUN, layer=HEAD_NAMES[1], kind="output", step=1)
    np.testing.assert_allclose(http_client.panels(say)[0], -2 * http_client.panels(it_s)[0], rtol=1e-6)


@pytest.mark.slow
def test_an_encoded_name_is_not_a_second_name_for_the_layer(server):
    _, url = server
    status, body = http_client.get(url, "/frame", run=PLAIN_RUN, layer=metadata.encode_name(ODD_LAYER), kind="weight", step=0)
    assert status == 404 and f"close matches: {ODD_LAYER!r}" in body["error"]  # the name it was encoded from


@pytest.mark.slow
def test_run_names_the_fast_loader_cannot_read(server):
    loader, url = server
    status, body = http_client.get(url, "/runs")
    assert status == 200 and set(body["runs"]) == {PLAIN_RUN, WORKING_RUN, *UNREADABLE_RUNS}
    for run, char in UNREADABLE_RUNS.items():
        for path, params in [("/layers", {}), ("/architecture", {}), ("/plan", {}), ("/frame", {"layer": HEAD_NAMES[0], "kind": "output", "step": 2})]:
            status, body = http_client.get(url, path, run=run, **params)
            if loader == "python":
                assert status == 200, (run, path, body)
                continue
            assert (status, body["code"]) == (400, 400), (run, path, body)
            error = body["error"]
            assert error.startswith(f"run {run!r} cannot be read by TensorBoard's fast data loader"), error
            assert f"{char!r} (U+{ord(char):04X})" in error and "Rename the run folder" in error and "--load_fast=false" in error
            assert "Invalid argument" not in error and "blob key" not in error


def test_tags_written_before_names_were_encoded_still_read(tmp_path):
    """A layer name with "/" in a raw tag (an older Xray) is found by its decoded name, on the Python loader."""
    header = metadata.FrameHeader("r", "enc/dec", "weight", 0, 0.0, [2], "float32", 0, [0, 1], None, "KeepAll()")
    value = metadata.frame_value(header, np.array([1.5, -2.0], np.float32))
    value.tag = "xray/frame/enc/dec/weight"
    writer = EventFileWriter(str(tmp_path / "old"))
    writer.add_event(event_pb2.Event(step=0, wall_time=1.0, summary=summary_pb2.Summary(value=[value])))
    writer.close()
    client = serve(tmp_path)
    status, layers = get_in_process(client, "/layers", run="old")
    assert status == 200 and [layer["name"] for layer in layers["layers"]] == ["enc/dec"]
    status, frame = get_in_process(client, "/frame", run="old", layer="enc/dec", kind="weight", step=0)
    assert status == 200 and (frame["min"], frame["max"]) == (-2.0, 1.5)
