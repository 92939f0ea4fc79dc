"""The contract between recorder and plugin (``tb_plugin/metadata.py``) on its own: tags, names,
plugin content, arrays and the frame layout, on real values."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from tensorboard.compat.proto import summary_pb2, types_pb2

from tb_plugin import metadata

ODD_NAMES = [
    "conv1", "features.0", "head['logits']", "lstm[0]", 'quote"d', "back\\slash", "tab\there", "new\nline",
    "a/b/c", "100%", "%41", "ünïcödé", "層", "🙂 emoji", "lone \ud800 surrogate", " spaced ", "x" * 300,
]  # fmt: skip


def header(**changes) -> metadata.FrameHeader:
    fields = dict(run_id="abc", layer="conv1", kind="output", step=10, wall_time=1.5, original_shape=[32, 6, 8, 8],
                  dtype="float32", dim=1, indices=[0, 2, 5], batch_index=0, selector="RandomFilters(max_filters=16)")  # fmt: skip
    return metadata.FrameHeader(**{**fields, **changes})


@pytest.mark.parametrize("name", ODD_NAMES)
def test_names_round_trip_and_their_tags_hold_no_character_a_loader_refuses(name):
    encoded = metadata.encode_name(name)
    assert metadata.decode_name(encoded) == name
    assert not any(char in encoded for char in '"\\/') and all(ord(char) >= 32 for char in encoded)
    for kind in metadata.KINDS:
        tag = metadata.frame_tag(name, kind)
        assert tag.count("/") == 3 and metadata.parse_frame_tag(tag) == (name, kind)
        for stat in metadata.STATS:
            assert metadata.parse_stat_tag(metadata.stat_tag(name, kind, stat)) == (name, kind, stat)


def test_encoding_is_percent_utf8_and_leaves_common_names_alone():
    assert metadata.encode_name("head['logits'] (x) <y>: a,b=c+d@e!f*g~h") == "head['logits'] (x) <y>: a,b=c+d@e!f*g~h"
    assert metadata.encode_name('ü/"%\t') == "%C3%BC%2F%22%25%09"
    assert metadata.frame_tag("a/b", "weight") == "xray/frame/a%2Fb/weight"
    assert metadata.stat_tag("a/b", "grad", "max") == "xray_stats/a%2Fb/grad/max"
    assert metadata.decode_name("legacy name") == "legacy name"  # tags written before names were encoded
    assert metadata.decode_name("%zz stays") == "%zz stays"
    assert metadata.decode_name("%FF") == "\ufffd"  # bytes that are not UTF-8 decode, replaced


@pytest.mark.parametrize(
    "tag", ["xray/meta/plan", "xray/frame/conv1/nope", "xray/frame//weight", "xray/frame/weight", "loss", "xray_stats/conv1/weight/median"]
)
def test_other_tags_do_not_parse_as_frames_or_statistics(tag):
    assert metadata.parse_frame_tag(tag) is None and metadata.parse_stat_tag(tag) is None


def test_summary_metadata_carries_the_plugin_name_the_blob_class_and_a_versioned_content():
    made = metadata.create_summary_metadata({"type": "frame", "layer": "a/b", "kind": "weight"})
    assert made.plugin_data.plugin_name == metadata.PLUGIN_NAME == "xray"
    assert made.data_class == summary_pb2.DATA_CLASS_BLOB_SEQUENCE
    parsed = metadata.parse_plugin_content(made.plugin_data.content)
    assert parsed == {"type": "frame", "layer": "a/b", "kind": "weight", "version": metadata.CONTENT_VERSION}
    assert metadata.parse_plugin_content(summary_pb2.SummaryMetadata.FromString(made.SerializeToString()).plugin_data.content) == parsed


@pytest.mark.parametrize("content", [b'{"version": 2, "type": "frame"}', b'{"type": "frame"}', b"[1, 2]", b"not json", b"\xff\xfe", b"[" * 100_000])
def test_unknown_or_unreadable_plugin_content_is_skipped(content):
    assert metadata.parse_plugin_content(content) is None


@pytest.mark.parametrize(
    "values",
    [
        np.arange(24, dtype=np.float32).reshape(2, 3, 4),
        np.asarray([1.5, np.nan, np.inf, -np.inf, -0.0, 65504], dtype=np.float16),
        np.asarray([[1e-300, -1e300], [np.nan, 0.0]], dtype=np.float64),
        np.arange(12, dtype=np.float32).reshape(3, 4).T,  # not contiguous
        np.float32(3.25),
        np.zeros((0, 5), dtype=np.float32),
        np.asarray([-(2**62), 7], dtype=np.int64),
        np.asarray([True, False]),
        np.arange(4, dtype=">f4"),  # big-endian keeps its byte order
    ],
)
def test_arrays_round_trip_exactly_as_npy(values):
    encoded = metadata.encode_array(values)
    decoded = metadata.decode_array(encoded)
    assert decoded.dtype == np.asarray(values).dtype and decoded.shape == np.shape(values)
    np.testing.assert_array_equal(decoded, values)
    saved = io.BytesIO()
    np.save(saved, np.array(values, order="C"), allow_pickle=False)
    assert encoded == saved.getvalue()  # the file np.save writes


def test_object_arrays_are_refused():
    with pytest.raises(ValueError, match="numbers"):
        metadata.encode_array(np.asarray([object()], dtype=object))


def test_a_frame_is_two_blobs_a_json_header_with_its_checksum_and_the_npy_values():
    values = np.random.default_rng(0).standard_normal((3, 8, 8)).astype(np.float32)
    summary = summary_pb2.Summary()
    metadata.add_frame(summary, header(path="['logits']"), values)
    (value,) = summary.value
    assert value.tag == "xray/frame/conv1['logits']/output"
    assert metadata.parse_plugin_content(value.metadata.plugin_data.content) == {"type": "frame", "layer": "conv1['logits']", "kind": "output", "version": 1}
    assert value.tensor.dtype == types_pb2.DT_STRING and [d.size for d in value.tensor.tensor_shape.dim] == [2]
    header_blob, values_blob = value.tensor.string_val
    fields = json.loads(header_blob)
    assert set(fields) == {"run_id", "layer", "kind", "step", "wall_time", "original_shape", "dtype", "dim", "indices",
                           "batch_index", "selector", "path", "crc32"}  # fmt: skip
    assert fields["dim"] == 1 and fields["indices"] == [0, 2, 5] and fields["batch_index"] == 0
    decoded_header, decoded = metadata.decode_frame(header_blob, values_blob)
    assert decoded_header == header(path="['logits']", crc32=fields["crc32"]) and decoded_header.name == "conv1['logits']"
    np.testing.assert_array_equal(decoded, values)
    assert metadata.frame_value(header(), values).tag == "xray/frame/conv1/output"


def test_a_damaged_frame_is_refused_and_an_old_header_still_reads():
    summary = summary_pb2.Summary()
    metadata.add_frame(summary, header(), np.ones((2, 2), dtype=np.float32))
    header_blob, values_blob = summary.value[0].tensor.string_val
    flipped = values_blob[:-1] + bytes([values_blob[-1] ^ 1])
    with pytest.raises(metadata.DamagedFrameError, match="checksum"):
        metadata.decode_frame(header_blob, flipped)
    old = {k: v for k, v in json.loads(header_blob).items() if k not in ("path", "crc32")}
    old["written_by_a_newer_recorder"] = True  # unknown fields are ignored
    read, values = metadata.decode_frame(json.dumps(old).encode(), flipped)  # no checksum: not checked
    assert read.crc32 is None and read.path == "" and values.shape == (2, 2)
    with pytest.raises(metadata.DamagedFrameError, match="do not decode"):
        metadata.decode_frame(json.dumps(old).encode(), b"\x93NUMPY garbage")


def test_documents_and_statistics_summaries():
    architecture = {"nodes": [{"kind": "module", "module": "conv", "type": "Conv2d"}, {"kind": "op"}, {"kind": "module", "module": "lstm", "type": "LSTM"}]}
    (value,) = metadata.json_summary(metadata.ARCHITECTURE_TAG, architecture).value
    assert value.tag == "xray/meta/architecture" and json.loads(value.tensor.string_val[0]) == architecture
    assert metadata.parse_plugin_content(value.metadata.plugin_data.content) == {"type": "architecture", "version": 1}
    scalars = metadata.stats_values("a/b", "weight", {"min": -1.0, "max": 2.0})
    assert [(v.tag, v.simple_value) for v in scalars] == [("xray_stats/a%2Fb/weight/min", -1.0), ("xray_stats/a%2Fb/weight/max", 2.0)]
    assert metadata.module_types(architecture) == {"conv": "Conv2d", "lstm": "LSTM"} and metadata.module_types(None) == {}
    assert metadata.base_layer("lstm[0]") == "lstm"
    assert sorted(["zeta", "lstm[1]", "conv", "lstm[0]"], key=metadata.layer_sort_key(architecture)) == ["conv", "lstm[0]", "lstm[1]", "zeta"]
