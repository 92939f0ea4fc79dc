"""examples/notebook.ipynb runs top to bottom in a real Jupyter kernel, draws the last capture inline,
and its ``%tensorboard`` cell starts a TensorBoard that shows the Xray tab."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.tensorboard_server import get_json

pytestmark = [pytest.mark.notebook, pytest.mark.slow]
nbclient = pytest.importorskip("nbclient", reason="the notebook test needs nbclient and ipykernel (the 'test' extra)")
nbformat = pytest.importorskip("nbformat")

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook.ipynb"


def test_the_example_notebook_runs_and_its_tensorboard_shows_the_xray_tab(tmp_path, monkeypatch):
    # The kernel inherits this environment: the %tensorboard magic starts this environment's
    # tensorboard and keeps its bookkeeping in TMPDIR, here the test's own folder.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("TENSORBOARD_BINARY", str(Path(sys.executable).with_name("tensorboard")))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    started = []
    with client.setup_kernel():  # TensorBoard is asked while the kernel that started it still runs
        try:
            for index, cell in enumerate(notebook.cells):
                client.execute_cell(cell, index)
            started = [json.loads(path.read_text()) for path in (tmp_path / ".tensorboard-info").glob("pid-*.info")]
            assert len(started) == 1 and started[0]["logdir"] == "runs"
            listing = get_json(f"http://127.0.0.1:{started[0]['port']}/data/plugins_listing")
        finally:
            for info in started:
                stop_pid(info["pid"])

    assert listing["xray"]["enabled"] and listing["xray"]["tab_name"] == "Xray"
    outputs = {index: cell.get("outputs", []) for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"}
    assert not [output for cell in outputs.values() for output in cell if output["output_type"] == "error"]
    text = "".join(output.get("text", "") for cell in outputs.values() for output in cell if output["output_type"] == "stream")
    assert "conv output recorded at steps [0, 20, 40, 60, 80, 100, 120, 140, 160, 180]" in text
    assert "conv activation at step 180: stored" in text
    assert any("image/png" in output.get("data", {}) for cell in outputs.values() for output in cell)  # show_last_graphs
    assert (tmp_path / "runs" / "notebook").is_dir()


def stop_pid(pid: int) -> None:
    """Stop the TensorBoard the notebook started, by its PID (the kernel does not stop it)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and running(pid):
            time.sleep(0.1)
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def running(pid: int) -> bool:
    """Whether ``pid`` still runs (an exited child the kernel has not reaped yet does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
