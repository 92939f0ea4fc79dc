"""Xray's own event file: TensorBoard's record format, written at once, read by TensorBoard's loader."""

from __future__ import annotations

import numpy as np
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import event_pb2, summary_pb2

from tb_plugin import metadata
from xray_tb.io.event_file import FILE_SUFFIX, EventFile


def test_records_are_read_back_by_tensorboard_while_the_file_is_open(tmp_path):
    header = metadata.FrameHeader("run", "fc", "weight", 3, 1.5, [300, 200], "float32", 0, list(range(64)), None, "FirstN()")
    values = np.random.default_rng(0).standard_normal((64, 200)).astype(np.float32)  # a 51 KB blob
    written = event_pb2.Event(step=3, wall_time=1.5, summary=summary_pb2.Summary(value=[metadata.frame_value(header, values)]))
    metadata.add_stats(written.summary, "fc", "weight", {"mean": 0.5, "max": 2.0})

    events = EventFile(str(tmp_path / "run"))
    events.add_event(written)
    # No flush or close: a capture is on disk as soon as it is added.
    read = list(EventFileLoader(events.path).Load())
    events.close()
    events.close()  # idempotent

    assert events.path.endswith(FILE_SUFFIX) and "tfevents" in events.path
    assert read[0].file_version == "brain.Event:2"
    assert len(read) == 2 and read[1].step == 3 and read[1].wall_time == 1.5
    # The Python loader turns simple values into tensors; the frame's blobs come back byte for byte.
    frame = read[1].summary.value[0]
    assert frame.tag == "xray/frame/fc/weight" and frame.metadata.plugin_data.plugin_name == metadata.PLUGIN_NAME
    stored_header, stored_values = frame.tensor.string_val
    assert metadata.FrameHeader.from_json(stored_header) == header
    np.testing.assert_array_equal(metadata.decode_array(stored_values), values)
    assert [value.tag for value in read[1].summary.value[1:]] == ["xray_stats/fc/weight/mean", "xray_stats/fc/weight/max"]
