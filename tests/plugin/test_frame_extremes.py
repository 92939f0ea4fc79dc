"""``frame_stats.frame_extremes`` (what ``/ranges`` reads of every capture) agrees with the general decoder."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tensorboard.compat.proto import summary_pb2

from tb_plugin import frame_stats


def written(frames) -> list[bytes]:
    summary = summary_pb2.Summary()
    frame_stats.add_frame_stats(summary, frames)
    return list(summary.value[0].tensor.string_val)


def test_the_extremes_are_the_decoded_min_and_max_of_the_frames_whose_both_are_finite():
    frames = [("0", "weight", {"mean": 0.1, "min": -1.5, "max": 2.25}),
              ("0", "grad", {"min": float("nan"), "max": 3.0}),
              ("fc.1", "output", {"min": -float("inf"), "max": 1.0}),
              ("fc.1", "activation", {"min": 0.0, "max": 7.5e-12})]
    for _ in range(3):  # the first read parses the headers, the next ones reuse them
        blobs = written(frames)
        decoded = {(layer, kind): (stats["min"], stats["max"]) for layer, kind, stats in frame_stats.decode_frame_stats(blobs)
                   if math.isfinite(stats["min"]) and math.isfinite(stats["max"])}
        assert frame_stats.frame_extremes(blobs) == decoded == {("0", "weight"): (-1.5, 2.25), ("fc.1", "activation"): (0.0, 7.5e-12)}


def test_captures_of_other_frames_and_damaged_blobs():
    one, other = written([("a", "weight", {"min": 1.0, "max": 2.0})]), written([("b", "grad", {"min": -3.0, "max": 4.0}),
                                                                             ("c", "grad", {"min": 5.0, "max": 6.0})])
    assert len(one) == 1 and one[0].startswith(frame_stats.ONE_BLOB)  # one ReadBlob call per capture on the fast loader
    assert frame_stats.frame_extremes(one) == {("a", "weight"): (1.0, 2.0)}
    assert frame_stats.frame_extremes(other) == {("b", "grad"): (-3.0, 4.0), ("c", "grad"): (5.0, 6.0)}
    (header, _), (_, two_rows) = frame_stats.parts(one), frame_stats.parts(other)
    for damaged in ([header, two_rows],  # a header of one frame, a matrix of two rows
                    [header, frame_stats.parts(one)[1][:-8]],  # a matrix cut short
                    [one[0][:len(frame_stats.ONE_BLOB) + 6]],  # a blob cut inside its header
                    [b"not frame statistics"], []):
        with pytest.raises(ValueError):
            frame_stats.frame_extremes(damaged)
    assert np.isnan(frame_stats.decode_frame_stats(written([("a", "weight", {})]))[0][2]["min"])


def test_runs_written_before_the_one_blob_layout_read_alike():
    frames = [("0", "weight", {"mean": 0.5, "std": 0.25, "min": -1.0, "max": 2.0, "nonfinite": 0.0})]
    new = written(frames)
    old = list(frame_stats.parts(new))  # the header and the matrix as two blobs
    assert frame_stats.decode_frame_stats(old) == frame_stats.decode_frame_stats(new)
    assert frame_stats.decode_frame_stats(new)[0][2]["std"] == 0.25
    assert frame_stats.frame_extremes(old) == frame_stats.frame_extremes(new) == {("0", "weight"): (-1.0, 2.0)}
