"""Fixtures shared by the plugin tests."""

from __future__ import annotations

import sys

import pytest

from tests.tensorboard_server import LOADERS, tensorboard


@pytest.fixture(scope="module", params=list(LOADERS))
def server(request, logdir, tmp_path_factory):
    """``(loader, base URL)`` of a real TensorBoard on the module's ``logdir``, once per loader."""
    with tensorboard(sys.executable, logdir, cwd=tmp_path_factory.mktemp("tb"), extra=LOADERS[request.param]) as url:
        yield request.param, url
