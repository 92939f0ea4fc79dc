"""Fast CRC32C for TensorBoard's event files, when the optional ``google-crc32c`` is installed.

Without TensorFlow, TensorBoard checksums every record it writes or reads with a pure-Python CRC32C
(about 170 ns a byte: 3 ms for a 20 KB frame), which would dominate a capture. :func:`use_fast_crc32c`
points TensorBoard's writer and reader at google-crc32c's C implementation; the checksums are the
same, so files stay readable by anything.
"""

from __future__ import annotations

import warnings

_MASK = 0xFFFFFFFF
_installed = False
_warned = False


def use_fast_crc32c() -> bool:
    """Make TensorBoard's record writer and reader use google-crc32c; False when it is not installed."""
    global _installed
    if _installed:
        return True
    try:
        import google_crc32c
    except ImportError:
        return False
    if google_crc32c.implementation != "c":
        return False
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
    from tensorboard.summary.writer import record_writer

    def crc32c(data) -> int:
        return google_crc32c.value(bytes(data))

    def masked_crc32c(data) -> int:
        crc = crc32c(data)
        return ((((crc >> 15) | (crc << 17)) & _MASK) + 0xA282EAD8) & _MASK

    pywrap_tensorflow.crc32c = crc32c
    pywrap_tensorflow.masked_crc32c = masked_crc32c
    record_writer.masked_crc32c = masked_crc32c
    _installed = True
    return True


def warn_if_slow() -> None:
    """Warn once per process when google-crc32c is missing: every byte Xray writes is then checksummed
    in pure Python (about 0.4 s for a 2 MiB capture)."""
    global _warned
    if not use_fast_crc32c() and not _warned:
        _warned = True
        warnings.warn(
            "google-crc32c is not installed, so TensorBoard's pure-Python CRC32C checksums every byte Xray writes "
            "(about 0.4 s for a 2 MiB capture); install it with pip install 'xray-tb[fast]' (or google-crc32c)",
            stacklevel=4,
        )
