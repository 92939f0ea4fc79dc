"""The fast CRC32C gives TensorBoard's own checksums."""

import os

import pytest
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

from xray_tb import checksums

pytest.importorskip("google_crc32c")


def test_fast_crc32c_matches_tensorboards_python_one(monkeypatch):
    pure_masked, pure_crc = pywrap_tensorflow.masked_crc32c, pywrap_tensorflow.crc32c
    monkeypatch.setattr(checksums, "_installed", False)
    assert checksums.use_fast_crc32c()
    for data in (b"", b"a", os.urandom(7), os.urandom(20_000), bytearray(os.urandom(33))):
        assert pywrap_tensorflow.crc32c(data) == pure_crc(data)
        assert pywrap_tensorflow.masked_crc32c(data) == pure_masked(data)
