"""Remote logdirs: a run written to S3 through TensorBoard's own file layer, against a real
S3-compatible server (moto in server mode on 127.0.0.1), read back by open_run and served by a real
``tensorboard --logdir s3://...`` whose /frame answers match the local run's."""

from __future__ import annotations

import os
import re
import sys
import time
import urllib.parse
import warnings
from pathlib import Path

import pytest
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from tests.damaged_files import damage_file, record_spans
from tests.helpers.training import tiny_model, train_on_6x6
from tests.tensorboard_server import get_json, tensorboard
from xray_tb import DamagedEventFileWarning, UploadIncompleteError, UploadWarning, Xray, open_run
from xray_tb.selectors import KeepAll

pytestmark = pytest.mark.s3

PLAN = {"0": {"weight": True, "weight_grad": True, "output": True, "grad": True}, "3": {"weight": True, "output": True}}


def train(model: nn.Module, xrays: list, steps: int) -> None:
    """A few SGD steps, each captured by every Xray in ``xrays``."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_on_6x6(model, optimizer, torch.Generator().manual_seed(1), range(steps), lambda step: [xray.take_graphs(step) for xray in xrays])


def keys(client, prefix: str = "", bucket: str = "xray") -> list[str]:
    """The object keys under ``prefix``, sorted."""
    return sorted(item["Key"] for item in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))


def test_a_run_written_to_s3_reads_back_like_the_local_twin(s3, tmp_path):
    _, client = s3
    model = tiny_model()
    options = dict(input_size=(1, 6, 6), plan=PLAN, selector=KeepAll(), health=False)
    local = Xray(model, logdir=str(tmp_path / "run"), **options)
    remote = Xray(model, logdir="s3://xray/twin/run", **options)
    before = keys(client, "twin/run/")
    train(model, [local, remote], steps=3)
    remote.flush()  # uploads run in the background: wait for them
    after_captures = keys(client, "twin/run/")
    old_frame, _ = remote.load("0", "weight_grad", 0)  # not the last capture: read back from S3
    local.close()
    remote.close()

    # Xray's own file went up as segments: the architecture and plan when Xray started, then one per capture.
    assert len(before) == 1 and len(after_captures) == 4 and after_captures[0] == before[0]
    assert all(key.endswith(".xray") and "/events.out.tfevents." in key for key in after_captures)
    assert sorted(after_captures) == after_captures  # names sort in write order, which is how runs are read
    torch.testing.assert_close(old_frame, local.load("0", "weight_grad", 0)[0], rtol=0, atol=0)

    from_s3, from_disk = open_run("s3://xray/twin/run"), open_run(tmp_path / "run")
    assert from_s3.records() == from_disk.records() == {
        "0": {"weight": [0, 1, 2], "weight_grad": [0, 1, 2], "output": [0, 1, 2], "grad": [0, 1, 2]},
        "3": {"weight": [0, 1, 2], "output": [0, 1, 2]},
    }
    assert from_s3.architecture == from_disk.architecture and from_s3.plan == from_disk.plan
    for layer, kinds in from_disk.records().items():
        for kind, steps in kinds.items():
            for step in steps:
                remote_values, remote_header = from_s3.load(layer, kind, step)
                local_values, local_header = from_disk.load(layer, kind, step)
                assert torch.equal(remote_values, local_values)
                assert remote_header.original_shape == local_header.original_shape
    assert from_s3.to_pandas()[["mean", "std"]].equals(from_disk.to_pandas()[["mean", "std"]])


def test_training_health_on_s3_reads_back_like_the_local_twin(s3, tmp_path):
    from xray_tb import HealthOptions

    model = tiny_model()
    options = dict(input_size=(1, 6, 6), plan=PLAN, health=HealthOptions(every=1))
    local = Xray(model, logdir=str(tmp_path / "run"), **options)
    remote = Xray(model, logdir="s3://xray/health/run", **options)
    train(model, [local, remote], steps=4)
    local.close()
    remote.close()
    from_s3, from_disk = open_run("s3://xray/health/run"), open_run(tmp_path / "run")
    layers, steps, values = from_s3.health("grad_l2")
    assert layers == ["0", "3"] and list(steps) == [0, 1, 2, 3]
    expected = from_disk.health("grad_l2")
    assert layers == expected[0] and np.array_equal(steps, expected[1]) and np.array_equal(values, expected[2])
    assert [f.rule for f in from_s3.findings()] == [f.rule for f in from_disk.findings()]


def test_open_run_reads_what_was_uploaded_since_the_last_reload(s3):
    model = tiny_model()
    with Xray(model, input_size=(1, 6, 6), plan=PLAN, logdir="s3://xray/growing/run", health=False) as xray:
        train(model, [xray], steps=1)
        xray.flush()
        run = open_run("s3://xray/growing/run")
        assert run.records()["0"]["weight"] == [0]
        xray.take_graphs(1)
        xray.flush()
        run.reload()
        assert run.records()["0"]["weight"] == [0, 1]


def test_a_summary_writer_on_s3_receives_xray_next_to_its_scalars(s3):
    from torch.utils.tensorboard import SummaryWriter

    _, client = s3
    model = tiny_model()
    writer = SummaryWriter("s3://xray/writer/run")
    with Xray(model, input_size=(1, 6, 6), plan=PLAN, writer=writer, health=False) as xray:
        train(model, [xray], steps=2)
        writer.add_scalar("loss", 0.5, 1)
    writer.close()

    files = [key for key in keys(client, "writer/run/") if "tfevents" in key]
    assert len(files) == 1 and not files[0].endswith(".xray")  # one file: the writer's own
    run = open_run("s3://xray/writer/run")
    assert run.records()["0"]["weight_grad"] == [0, 1]


def test_a_failed_upload_is_kept_and_retried_until_it_succeeds(s3):
    _, client = s3
    client.create_bucket(Bucket="flaky")
    model = tiny_model()
    xray = Xray(model, input_size=(1, 6, 6), plan=PLAN, logdir="s3://flaky/run", health=False)
    train(model, [xray], steps=1)
    xray.flush()
    for key in keys(client, bucket="flaky"):
        client.delete_object(Bucket="flaky", Key=key)
    client.delete_bucket(Bucket="flaky")  # the next upload fails for real
    with pytest.warns(UploadWarning) as caught:
        xray.take_graphs(1)
        with pytest.raises(UploadIncompleteError, match=r"1 segments .* were not uploaded to s3://flaky/run within 0.5 s"):
            xray.flush(timeout=0.5)
        client.create_bucket(Bucket="flaky")
        xray.take_graphs(2)
        xray.close()
    messages = [str(warning.message) for warning in caught]
    assert len(messages) == 2, messages
    assert re.match(r"uploads to s3://flaky/run are failing: could not upload \d+ bytes .*NoSuchBucket.*1 segments", messages[0])
    assert re.match(r"uploads to s3://flaky/run work again after", messages[1])
    assert open_run("s3://flaky/run").records()["0"]["weight"] == [1, 2]  # step 0 went with the deleted bucket


def test_a_missing_bucket_is_refused_when_xray_starts(s3):
    with pytest.raises(OSError, match=r"s3://no-such-bucket/run .*NoSuchBucket.*Check that the bucket exists"):
        Xray(tiny_model(), input_size=(1, 6, 6), logdir="s3://no-such-bucket/run")


def test_open_run_on_s3_says_what_is_missing(s3):
    with pytest.raises(FileNotFoundError, match="no such run directory: 's3://xray/nothing/here'"):
        open_run("s3://xray/nothing/here")


def record_locally(folder: Path) -> Path:
    """A local run of 3 captures; its one event file."""
    model = tiny_model()
    with Xray(model, input_size=(1, 6, 6), plan=PLAN, logdir=str(folder), health=False) as xray:
        train(model, [xray], steps=3)
    return next(folder.glob("events.out.tfevents.*"))


@pytest.mark.parametrize("damage", ["flipped payload byte", "zeroed record", "1 TiB length, valid header crc"])
def test_a_damaged_file_on_s3_reads_like_the_same_file_on_disk(s3, tmp_path, damage):
    _, client = s3
    path = record_locally(tmp_path / "run")
    offset = damage_file(path, damage, index=4)  # the second capture (after the version, architecture, plan, first capture)
    client.put_object(Bucket="xray", Key=f"damaged/{damage}/{path.name}", Body=path.read_bytes())

    with pytest.warns(DamagedEventFileWarning, match=f"damaged record at byte {offset} ") as on_s3:
        remote = open_run(f"s3://xray/damaged/{damage}")
    with pytest.warns(DamagedEventFileWarning, match=f"damaged record at byte {offset} "):
        local = open_run(tmp_path / "run")
    assert remote.records() == local.records() and len(remote.records()["0"]["weight"]) == 2  # one capture lost
    assert f"s3://xray/damaged/{damage}/{path.name}" in str(on_s3[0].message)


def test_a_file_rewritten_longer_on_s3_is_read_on_from_where_reading_stopped(s3, tmp_path):
    """TensorBoard's S3 writer (a SummaryWriter's) uploads its whole file again as it grows; a reload
    reads only what was added, and a record cut short at the end waits for its rest."""
    _, client = s3
    data = record_locally(tmp_path / "run").read_bytes()
    start, end = record_spans(data)[4]  # the version, the architecture, the plan, then one record per capture
    cut = (start + end) // 2  # inside the second capture's record
    client.put_object(Bucket="xray", Key="growing-file/run/events.out.tfevents.1", Body=data[:cut])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a record still being written is no damage
        run = open_run("s3://xray/growing-file/run")
        assert run.records()["0"]["weight"] == [0]
        client.put_object(Bucket="xray", Key="growing-file/run/events.out.tfevents.1", Body=data)
        run.reload()
    assert run.records()["0"]["weight"] == [0, 1, 2]


@pytest.mark.slow
def test_tensorboard_serves_the_s3_run_like_the_local_one(s3, tmp_path):
    model = tiny_model()
    options = dict(input_size=(1, 6, 6), plan=PLAN)
    with Xray(model, logdir=str(tmp_path / "logs" / "run"), **options) as local, \
            Xray(model, logdir="s3://xray/served/run", **options) as remote:
        train(model, [local, remote], steps=3)

    # --logdir s3://... runs TensorBoard's Python loader (its Rust data server reads local and gs:// only).
    with tensorboard(sys.executable, "s3://xray/served", cwd=tmp_path) as s3_url, \
            tensorboard(sys.executable, tmp_path / "logs", cwd=tmp_path, extra=["--load_fast=false"]) as local_url:
        answers = {}
        for name, url in (("s3", s3_url), ("local", local_url)):
            base = f"{url}/data/plugin/xray"
            layers = get_json(f"{base}/layers?run=run")
            frames = {
                (layer["name"], kind, step): get_json(f"{base}/frame?" + urllib.parse.urlencode(
                    {"run": "run", "layer": layer["name"], "kind": kind, "step": step}))
                for layer in layers["layers"] for kind, steps in layer["kinds"].items() for step in steps
            }
            answers[name] = (get_json(f"{base}/runs"), layers, get_json(f"{base}/architecture?run=run"), frames)

    s3_runs, s3_layers, s3_architecture, s3_frames = answers["s3"]
    local_runs, local_layers, local_architecture, local_frames = answers["local"]
    assert s3_runs == local_runs and s3_layers == local_layers and s3_architecture == local_architecture
    assert len(s3_frames) == 18 and s3_frames.keys() == local_frames.keys()
    for key, frame in s3_frames.items():
        twin = local_frames[key]
        for answer in (frame, twin):  # the two Xrays are two runs: their id and write times differ
            answer.pop("wall_time")
            answer["meta"].pop("run_id")
        assert frame == twin, key


@pytest.mark.slow
def test_tensorboard_on_s3_shows_each_capture_while_training_goes_on(s3, tmp_path):
    model = tiny_model()
    with Xray(model, input_size=(1, 6, 6), plan=PLAN, logdir="s3://xray/live/run", health=False) as xray:
        train(model, [xray], steps=1)
        with tensorboard(sys.executable, "s3://xray/live", cwd=tmp_path, extra=["--reload_interval=1"]) as url:
            # TensorBoard's first load of the store may not be over when it starts answering
            assert wait_for_steps(f"{url}/data/plugin/xray/layers?run=run", [0])
            xray.take_graphs(1)  # each capture is one new object, uploaded in the background at once
            xray.take_graphs(2)
            assert wait_for_steps(f"{url}/data/plugin/xray/layers?run=run", [0, 1, 2])


def wait_for_steps(url: str, steps: list[int], timeout: float = 30.0) -> bool:
    """Whether the route lists ``steps`` within ``timeout`` seconds (TensorBoard reloads every second)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if get_json(url)["steps"] == steps:
            return True
        time.sleep(0.3)
    return False


# A store that misbehaves: paused (SIGSTOP), answering 503, resetting connections, applying a PUT late.


@pytest.fixture
def quick_retries(monkeypatch):
    """Short per-attempt timeouts and backoff, so that outages in the tests last seconds."""
    from xray_tb.io import remote_event_file

    for name, value in dict(CONNECT_TIMEOUT=1.0, READ_TIMEOUT=1.0, BACKOFF_FIRST=0.1, BACKOFF_CAP=0.5, CLOSE_TIMEOUT=1.0).items():
        monkeypatch.setattr(remote_event_file, name, value)


@pytest.fixture
def paused_store(s3, tmp_path, quick_retries):
    """``(process, client)``: a moto server of its own (to pause with SIGSTOP), TensorBoard's file layer pointed at it."""
    import boto3

    from tests.integrations.s3_faults import pausable_moto
    from tests.integrations.s3_server import CREDENTIALS, s3_environment

    with pausable_moto(tmp_path) as (endpoint, process), s3_environment(endpoint):
        client = boto3.client("s3", endpoint_url=endpoint, region_name=CREDENTIALS["AWS_DEFAULT_REGION"])
        client.create_bucket(Bucket="paused")
        yield process, client


@pytest.fixture
def proxy(s3, quick_retries):
    """A :class:`FaultProxy` in front of the module's moto server; TensorBoard's file layer (and the
    uploads of an Xray made in the test) go through it, ``open_run`` after the test goes direct."""
    from tests.integrations.s3_faults import FaultProxy
    from tests.integrations.s3_server import s3_environment

    endpoint, _ = s3
    faults = FaultProxy(endpoint)
    try:
        with s3_environment(faults.url):
            yield faults
    finally:
        faults.close()


def assert_same_captures(remote: str, local: Path, steps: list[int]) -> None:
    """open_run(remote) holds the same frames as the local twin, every value equal, at ``steps``."""
    from_s3, from_disk = open_run(remote), open_run(local)
    assert from_s3.records() == from_disk.records()
    assert from_s3.records()["0"]["weight_grad"] == steps
    for layer, kinds in from_disk.records().items():
        for kind, recorded in kinds.items():
            for step in recorded:
                assert torch.equal(from_s3.load(layer, kind, step)[0], from_disk.load(layer, kind, step)[0]), (layer, kind, step)


def twins(local: Path, remote: str) -> tuple[nn.Module, Xray, Xray]:
    """A tiny model and two Xrays recording it alike, one to ``local``, one to ``remote``."""
    model = tiny_model()
    options = dict(input_size=(1, 6, 6), plan=PLAN, selector=KeepAll(), health=False)
    return model, Xray(model, logdir=str(local), **options), Xray(model, logdir=remote, **options)


def upload_warnings(caught) -> list[str]:
    return [("failing" if " are failing: " in str(w.message) else "recovered") for w in caught if issubclass(w.category, UploadWarning)]


@pytest.mark.slow
def test_a_paused_store_never_holds_up_training(paused_store, tmp_path):
    process, _ = paused_store
    from tests.integrations.s3_faults import pause, resume

    model, local, remote = twins(tmp_path / "run", "s3://paused/run")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1)
    durations = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(8):
            if step == 2:
                pause(process)
            if step == 7:
                resume(process)
            x, y = torch.randn(8, 1, 6, 6, generator=generator), torch.randint(0, 3, (8,), generator=generator)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            local.take_graphs(step)
            started = time.monotonic()
            remote.take_graphs(step)
            durations.append(time.monotonic() - started)
            optimizer.step()
            time.sleep(0.6)  # training goes on while the store is paused (3 s: an attempt gives up after about 2 s)
        local.close()
        remote.close(timeout=15)
    assert max(durations[2:7]) < 1.0, durations  # the five captures while paused
    assert upload_warnings(caught) == ["failing", "recovered"]
    assert_same_captures("s3://paused/run", tmp_path / "run", list(range(8)))


@pytest.mark.slow
def test_two_outages_give_two_warnings_each_followed_by_a_recovery_notice(proxy, tmp_path):
    model, local, remote = twins(tmp_path / "run", "s3://xray/outages/run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(model, [local, remote], steps=1)
        remote.flush()
        for outage in ("503", "reset"):
            proxy.mode = outage
            train(model, [local, remote], steps=2)
            with pytest.raises(UploadIncompleteError, match=r"segments .* were not uploaded .* kept in "):
                remote.flush(timeout=1.0)
            proxy.mode = "pass"
            remote.flush(timeout=10)
        local.close()
        remote.close()
    messages = [str(w.message) for w in caught if issubclass(w.category, UploadWarning)]
    assert upload_warnings(caught) == ["failing", "recovered", "failing", "recovered"], messages
    assert "ServiceUnavailable" in messages[0] and "are waiting, " in messages[0] and remote.recording._released._file.spool in messages[0]
    assert re.search(r"could not upload \d+ bytes .*(Connection|reset)", messages[2]), messages[2]
    assert "work again after" in messages[1] and "are waiting" in messages[1]
    # train() restarts its steps: steps 0 and 1 were written again (the last write wins); the twin did the same.
    assert_same_captures("s3://xray/outages/run", tmp_path / "run", [0, 1])


@pytest.mark.slow
def test_a_close_during_an_outage_is_bounded_and_flush_finishes_after_it(paused_store, tmp_path):
    process, client = paused_store
    from tests.integrations.s3_faults import pause, resume

    model, local, remote = twins(tmp_path / "run", "s3://paused/closed")
    train(model, [local, remote], steps=1)
    remote.flush()
    pause(process)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UploadWarning)
        train(model, [local, remote], steps=4)  # steps 0-3 again: the first written twice
        started = time.monotonic()
        with pytest.raises(UploadIncompleteError, match=r"segments .* were not uploaded to s3://paused/closed within 2 s; "
                           r"they are kept in .*xray-spool.* Call xray.flush") as raised:
            remote.close(timeout=2.0)
        assert time.monotonic() - started < 3.0
        assert remote.closed and raised.value.waiting >= 4
        spooled = sorted(os.listdir(raised.value.spool))
        assert len(spooled) == raised.value.waiting and all(name.endswith(".xray") for name in spooled)
        resume(process)
        remote.flush(timeout=15)
        remote.close()  # nothing left: returns at once
    local.close()
    assert not os.path.exists(raised.value.spool), os.listdir(raised.value.spool)
    assert_same_captures("s3://paused/closed", tmp_path / "run", [0, 1, 2, 3])


@pytest.mark.slow
def test_an_xray_collected_during_an_outage_keeps_its_captures_on_disk(proxy, tmp_path):
    import gc

    model = tiny_model()
    remote = Xray(model, input_size=(1, 6, 6), plan=PLAN, logdir="s3://xray/collected/run", health=False)
    proxy.mode = "503"
    with pytest.warns(UploadWarning) as caught:
        train(model, [remote], steps=3)
        del remote
        gc.collect()
    message = str(caught[-1].message)
    assert re.search(r"3 segments .* were not uploaded .* within 1 s; they are kept in ", message), message
    proxy.mode = "pass"  # the uploader goes on in the background after the collection
    deadline = time.monotonic() + 15
    with pytest.warns(UploadWarning, match="work again after"):
        while time.monotonic() < deadline and open_run("s3://xray/collected/run").records().get("0", {}).get("weight") != [0, 1, 2]:
            time.sleep(0.2)
    assert open_run("s3://xray/collected/run").records()["0"]["weight"] == [0, 1, 2]


@pytest.mark.slow
def test_a_put_answered_503_but_applied_late_never_replaces_a_newer_segment(proxy, s3, tmp_path):
    _, client = s3
    model, local, remote = twins(tmp_path / "run", "s3://xray/late/run")
    train(model, [local, remote], steps=1)
    remote.flush()
    proxy.mode, proxy.budget, proxy.late_delay = "late", 1, 1.5
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(model, [local, remote], steps=4)  # steps 0-3: the PUT of step 0's segment lands 1.5 s late
        remote.flush(timeout=10)
        deadline = time.monotonic() + 10
        while proxy.late_delivered < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        local.close()
        remote.close()
    assert proxy.faulted == 1 and proxy.late_delivered == 1 and upload_warnings(caught) == ["failing", "recovered"]
    names = keys(client, "late/run/")
    assert len(names) == len(set(names)) == 1 + 1 + 4 + 1  # start, one per capture twice (step 0's twice), none at close
    assert_same_captures("s3://xray/late/run", tmp_path / "run", [0, 1, 2, 3])
