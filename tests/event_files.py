"""Reading what the recorder wrote straight from the event files (independent of the plugin)."""

from __future__ import annotations

import glob
import json
import os

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util

from tb_plugin import metadata


def read_xray_events(logdir: str) -> tuple[dict, dict]:
    """``(frames, documents)``: frames ``{(layer, kind, step): (FrameHeader, ndarray)}`` and meta
    documents ``{tag: [(step, document), ...]}`` from every event file in ``logdir``."""
    frames, documents = {}, {}
    for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name not in ("", metadata.PLUGIN_NAME):
                    continue
                if not value.HasField("tensor") or value.tensor.dtype != 7:  # DT_STRING
                    continue
                blobs = list(tensor_util.make_ndarray(value.tensor))
                parsed = metadata.parse_frame_tag(value.tag)
                if parsed:
                    header = metadata.FrameHeader.from_json(blobs[0])
                    frames[(parsed[0], parsed[1], event.step)] = (header, metadata.decode_array(blobs[1]))
                elif value.tag in metadata.META_TAGS:
                    documents.setdefault(value.tag, []).append((event.step, json.loads(blobs[0])))
    return frames, documents
