"""Blob reads from TensorBoard's fast-loader data server, each group on a connection of its own.

The data server (``--load_fast``) writes a response in pieces on a socket without ``TCP_NODELAY``.
On a connection that has carried requests before, Linux delays its acknowledgement of the first
piece by up to 40 ms, and the server holds the next piece until it comes: every ``read_blob`` on
TensorBoard's shared channel takes about 44 ms, whatever its size (docs/performance.md, "Long
runs"). A new connection acknowledges at once, so a frame's blobs read on a connection of their own
take about 2 ms, the connection included.

So, when TensorBoard's data provider is its gRPC client of a data server at a loopback address (the
one ``--load_fast`` starts), :class:`BlobReads` reads a group of blobs (a frame's header and values)
on a short-lived channel: the same data server, the same ``ReadBlob`` calls and the credentials
type of TensorBoard's ``--grpc_creds_type``, all started together, then closed. The server's
address is the one TensorBoard's ``GrpcDataProvider`` was made with (its ``_addr``, read once; a
TensorBoard without it reads as before). Every other case reads through the data provider as
before: the Python loader, a data server at another host (a new connection costs a round trip
there), and a fresh read that fails for any reason.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Optional

import grpc
from tensorboard.data import grpc_provider
from tensorboard.data.proto import data_provider_pb2
from tensorboard.util import grpc_util

logger = logging.getLogger(__name__)

_MAX_MESSAGE = 256 * 1024 * 1024  # as TensorBoard's own channel to the data server
_TIMEOUT_SECONDS = 30.0


class BlobReads:
    """Reads groups of blobs: on a local data server each group on a new connection, else through
    the data provider."""

    def __init__(self, data_provider, flags=None):
        self._provider = data_provider
        self.address = loopback_address(data_provider)
        creds_type = getattr(flags, "grpc_creds_type", None)
        self._creds_type = creds_type if isinstance(creds_type, grpc_util.ChannelCredsType) else grpc_util.ChannelCredsType.LOCAL
        self.fresh_reads = 0  # groups read on a connection of their own (for tests and benches)

    def read(self, ctx, keys: list[str]) -> Optional[list[bytes]]:
        """The blobs of ``keys`` read on a new connection, or None where that does not apply or
        failed (the caller then reads through the data provider)."""
        if self.address is None or not keys:
            return None
        try:
            blobs = self._read_on_new_connection(keys)
        except Exception as error:  # noqa: BLE001 - the data provider's read says what is wrong, if anything
            logger.debug("xray: a blob read on a new connection failed (%s); reading through the data provider", error)
            return None
        self.fresh_reads += 1
        return blobs

    def _read_on_new_connection(self, keys: list[str]) -> list[bytes]:
        creds, options = self._creds_type.channel_config()
        options = [*options, ("grpc.max_receive_message_length", _MAX_MESSAGE), ("grpc.use_local_subchannel_pool", 1)]
        channel = grpc.secure_channel(self.address, creds, options=options)
        try:
            stub = grpc_provider.make_stub(channel)
            # Started together: the requests share the connection's first round trip.
            calls = [stub.ReadBlob(data_provider_pb2.ReadBlobRequest(blob_key=key), timeout=_TIMEOUT_SECONDS) for key in keys]
            return [b"".join(response.data for response in call) for call in calls]
        finally:
            channel.close()


def loopback_address(data_provider) -> Optional[str]:
    """``host:port`` of the data server behind TensorBoard's gRPC data provider when the host is a
    loopback address, else None."""
    if not isinstance(data_provider, grpc_provider.GrpcDataProvider):
        return None
    address = getattr(data_provider, "_addr", None)
    if not isinstance(address, str) or ":" not in address:
        return None
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return address
    try:
        return address if ipaddress.ip_address(host).is_loopback else None
    except ValueError:  # a host name other than localhost
        return None
