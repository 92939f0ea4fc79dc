"""The fast CRC32C gives TensorBoard's own checksums."""

import os

import pytest
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

from xray_tb.io import checksums

pytest.importorskip("google_crc32c")


def test_fast_crc32c_matches_tensorboards_python_one(monkeypatch):
    pure_masked, pure_crc = pywrap_tensorflow.masked_crc32c, pywrap_tensorflow.crc32c
    monkeypatch.setattr(checksums, "_installed", False)
    assert checksums.use_fast_crc32c()
    for data in (b"", b"a", os.urandom(7), os.urandom(20_000), bytearray(os.urandom(33))):
        assert pywrap_tensorflow.crc32c(data) == pure_crc(data)
        assert pywrap_tensorflow.masked_crc32c(data) == pure_masked(data)


def test_a_missing_fast_crc32c_is_warned_once(monkeypatch, tmp_path):
    import sys
    import warnings

    from xray_tb.io.sink import EventSink

    monkeypatch.setitem(sys.modules, "google_crc32c", None)  # as if it were not installed
    monkeypatch.setattr(checksums, "_installed", False)
    monkeypatch.setattr(checksums, "_warned", False)
    with pytest.warns(UserWarning, match=r"pip install 'xray-tb\[fast\]'"):
        EventSink(logdir=str(tmp_path / "a")).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EventSink(logdir=str(tmp_path / "b")).close()  # once per process
