"""Fixtures of the integration tests: a real S3-compatible server on loopback, and no hub access."""

from __future__ import annotations

import os

import pytest

# Nothing may be downloaded: Transformers models are built from configs, never fetched.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """``(endpoint, client)``: a moto server in server mode on 127.0.0.1 holding the empty bucket
    ``xray``, with TensorBoard's file layer and this process's environment pointed at it."""
    pytest.importorskip("boto3", reason="the S3 tests need the 's3' extra: pip install 'xray-tb[s3]'")
    pytest.importorskip("moto", reason="the S3 tests need moto (the 'test' extra)")
    import boto3

    from tests.integrations.s3_server import CREDENTIALS, moto_server, s3_environment

    with moto_server(tmp_path_factory.mktemp("moto")) as endpoint, s3_environment(endpoint):
        client = boto3.client("s3", endpoint_url=endpoint, region_name=CREDENTIALS["AWS_DEFAULT_REGION"])
        client.create_bucket(Bucket="xray")
        yield endpoint, client
