"""A non-editable install (a built wheel in a fresh venv) carries the frontend and serves the tab."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

import pytest

from tests.tensorboard_server import get_json, tensorboard

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_serves_the_xray_tab(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(REPO)], check=True)
    wheel = next((tmp_path / "dist").glob("xray_tb-*.whl"))
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)], check=True)
    # The dependencies (torch, tensorboard, ...) come from the test venv, after the fresh site-packages;
    # its editable install of xray-tb is not activated (.pth files there are not processed).
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    where = subprocess.check_output([python, "-c", "import tb_plugin, xray_tb; print(tb_plugin.__file__); print(xray_tb.__file__)"], cwd=tmp_path, text=True)
    assert all(line.startswith(str(site)) for line in where.split()), where
    assert (site / "tb_plugin" / "static" / "index.js").is_file()

    logdir = tmp_path / "logs"
    script = (
        "import torch; from torch import nn; from xray_tb import Xray\n"
        "m = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))\n"
        f"x = Xray(m, input_size=(4,), logdir={str(logdir / 'run')!r}, plan={{'0': {{'weight': True}}}})\n"
        "[x.take_graphs(s) for s in range(3)]; x.close()\n"
    )
    subprocess.run([python, "-c", script], cwd=tmp_path, check=True)
    with tensorboard(python, logdir, cwd=tmp_path) as url:
        assert get_json(f"{url}/data/plugin/xray/layers?run=run")["steps"] == [0, 1, 2]
        with urllib.request.urlopen(f"{url}/data/plugin/xray/static/index.js") as response:
            assert response.headers.get_content_type() == "text/javascript"
            assert b"export" in response.read()
