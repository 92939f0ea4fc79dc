"""The real `tensorboard` command (its default Rust data server) serves every captured step."""

from __future__ import annotations

import sys

import pytest

from tests.helpers.plugin_app import CAPTURES, record
from tests.tensorboard_server import get_json, tensorboard


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["rust", "python"])
def test_every_one_of_50_captures_is_served(tmp_path, loader):
    record(tmp_path / "logs" / "run", captures=CAPTURES)
    extra = ["--load_fast=false"] if loader == "python" else []
    with tensorboard(sys.executable, tmp_path / "logs", cwd=tmp_path, extra=extra) as url:
        layers = get_json(f"{url}/data/plugin/xray/layers?run=run")
        frame = get_json(f"{url}/data/plugin/xray/frame?run=run&layer=0&kind=grad&step=250")
    assert layers["steps"] == [step * 10 for step in range(CAPTURES)]
    assert all(len(steps) == CAPTURES for layer in layers["layers"] for steps in layer["kinds"].values())
    assert frame["step"] == 250 and frame["meta"]["original_shape"] == [8, 4, 6, 6]
