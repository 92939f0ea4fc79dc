"""Which data servers get blob reads on connections of their own (tb_plugin/blob_connections.py), and
that a read that cannot be made that way falls back to the data provider. The reads themselves, on a
real data server, are checked by tests/plugin/test_reads_per_request.py."""

from __future__ import annotations

import socket
import time

import grpc
import pytest
from tensorboard import context
from tensorboard.data import grpc_provider

from tb_plugin import blob_connections


def provider_at(address: str) -> grpc_provider.GrpcDataProvider:
    return grpc_provider.GrpcDataProvider(address, grpc_provider.make_stub(grpc.insecure_channel(address)))


@pytest.mark.parametrize("address, expected", [
    ("127.0.0.1:6006", "127.0.0.1:6006"),
    ("localhost:6006", "localhost:6006"),
    ("[::1]:6006", "[::1]:6006"),
    ("127.0.0.2:6006", "127.0.0.2:6006"),
    ("10.1.2.3:6006", None),  # another machine: a new connection would cost a round trip there
    ("data-server.internal:6006", None),
    ("no-port", None),
])
def test_only_a_data_server_at_a_loopback_address_is_read_on_new_connections(address, expected):
    assert blob_connections.loopback_address(provider_at(address)) == expected


def test_the_python_loaders_provider_is_read_as_before():
    assert blob_connections.loopback_address(object()) is None
    assert blob_connections.BlobReads(object()).read(context.RequestContext(), ["key"]) is None


def test_a_read_that_fails_on_a_new_connection_leaves_the_read_to_the_data_provider():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    reads = blob_connections.BlobReads(provider_at(f"127.0.0.1:{port}"))
    start = time.monotonic()
    assert reads.read(context.RequestContext(), ["a", "b"]) is None
    assert time.monotonic() - start < 10 and reads.fresh_reads == 0
