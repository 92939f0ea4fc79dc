"""The plugin never imports torch, ``xray_tb`` or matplotlib: a real TensorBoard in which the three
cannot be imported serves every route of a run the real recorder wrote, ``/gif`` included."""

from __future__ import annotations

import ast
import io
import sys
import textwrap
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import torch
from PIL import Image
from torch.nn import functional as F

from tests.tensorboard_server import get_json, tensorboard
from xray_tb import Xray
from xray_tb.bias.planted import LABELS, REGIONS, TinyCNN, batches, planted_images
from xray_tb.health import HealthOptions

REPOSITORY = Path(__file__).resolve().parents[2]
PLUGIN = REPOSITORY / "tb_plugin"
BLOCKED = ("torch", "xray_tb", "matplotlib")
STEPS = 6
#: A TensorBoard whose interpreter cannot import the blocked packages (each one's ``sys.modules``
#: entry is None, so ``import torch`` and ``import torch.nn`` raise ImportError), with this
#: checkout's ``tb_plugin`` first on the path.
LAUNCHER = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None
sys.path.insert(0, {repository!r})
sys.argv[0] = "tensorboard"
from tensorboard import main
main.run_main()
"""


def test_no_plugin_module_imports_torch_xray_tb_or_matplotlib():
    for path in sorted(PLUGIN.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not [n for n in names if n.split(".")[0] in BLOCKED], f"{path.name}:{node.lineno} imports {names}"


def test_plugin_modules_import_no_circle_and_no_private_name_of_another():
    modules = {path.stem: ast.parse(path.read_text(), str(path)) for path in PLUGIN.glob("*.py")}
    imports: dict[str, set[str]] = {}
    for name, tree in modules.items():
        imports[name] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "tb_plugin":
                imports[name] |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tb_plugin."):
                imports[name].add(node.module.split(".")[1])
                assert not [a.name for a in node.names if a.name.startswith("_")], f"{name} imports a private name of {node.module}"
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
                assert not node.attr.startswith("_"), f"{name} uses {node.value.id}.{node.attr}"

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import circle: {' -> '.join(path + (name,))}"
        for imported in imports.get(name, ()):
            visit(imported, path + (name,))

    for name in modules:
        visit(name, ())


def record(run_dir: Path) -> None:
    """A TinyCNN trained for a few steps: features.0's weight and output every step, health every step, and one
    Attention-IoU evaluation with examples."""
    images, labels, masks = planted_images(32, 0.5, seed=0)
    torch.manual_seed(0)
    model = TinyCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Xray(model, input_size=(3, 32, 32), logdir=str(run_dir), plan={"features.0": {"weight": True, "output": True}}, health=HealthOptions(every=1)) as xray:
        for step in range(STEPS):
            x, y = images[step * 4 : step * 4 + 4], labels[step * 4 : step * 4 + 4]
            optimizer.zero_grad()
            F.binary_cross_entropy_with_logits(model(x), y).backward()
            xray.take_graphs(step)
            optimizer.step()
        xray.attention_iou(batches(images, labels, masks, size=16), step=STEPS, target=0, protected=1, masks=list(REGIONS), names=LABELS, examples=2)


def fetch(url: str, route: str, **params) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(f"{url}/data/plugin/xray{route}?{urllib.parse.urlencode(params)}", timeout=60) as response:
            return response.status, response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as error:
        return error.code, error.read(), error.headers.get("Content-Type", "")


@pytest.mark.slow
def test_a_tensorboard_without_torch_serves_every_route(tmp_path):
    record(tmp_path / "logs" / "run")
    launcher = tmp_path / "tensorboard_without_torch.py"
    launcher.write_text(textwrap.dedent(LAUNCHER.format(blocked=BLOCKED, repository=str(REPOSITORY))))
    with tensorboard(sys.executable, tmp_path / "logs", cwd=tmp_path, main=[str(launcher)], extra=["--load_fast=false"]) as url:
        api = f"{url}/data/plugin/xray"
        assert get_json(f"{api}/runs")["runs"] == ["run"]
        layers = get_json(f"{api}/layers?run=run")
        assert layers["steps"] == list(range(STEPS)) and [layer["name"] for layer in layers["layers"]] == ["features.0"]
        health = get_json(f"{api}/health?run=run&stat=grad_l2")
        vectors = get_json(f"{api}/health?run=run&stat=channel_var")
        evaluation = get_json(f"{api}/bias/evaluations?run=run")["evaluations"][0]
        name, bias_step = evaluation["name"], evaluation["steps"][-1]
        frame = {"run": "run", "layer": "features.0", "kind": "weight"}
        requests = [
            ("/architecture", {"run": "run"}, "application/json"),
            ("/plan", {"run": "run"}, "application/json"),
            ("/frame", {**frame, "step": 3}, "application/json"),
            ("/frame_bin", {**frame, "step": 3}, "application/octet-stream"),
            ("/ranges", {"run": "run", "layer": "features.0"}, "application/json"),
            ("/gif", {**frame, "fps": 5}, "image/gif"),
            ("/findings", {"run": "run"}, "application/json"),
            ("/health_layer", {"run": "run", "layer": health["layers"][0]}, "application/json"),
            ("/health_vector", {"run": "run", "stat": "channel_var", "layer": vectors["layers"][0], "step": vectors["steps"][-1]}, "application/json"),
            ("/prune", {"run": "run"}, "application/json"),
            ("/bias/result", {"run": "run", "evaluation": name, "step": bias_step}, "application/json"),
            ("/bias/series", {"run": "run", "evaluation": name}, "application/json"),
            ("/bias/examples", {"run": "run", "evaluation": name, "step": bias_step}, "application/json"),
            ("/static/index.js", {}, "javascript"),
        ]
        for route, params, content_type in requests:
            status, body, served_type = fetch(url, route, **params)
            assert status == 200 and content_type in served_type, (route, status, body[:300])
        status, body, _ = fetch(url, "/gif", **frame, max_frames=4)
        gif = Image.open(io.BytesIO(body))
        assert body[:6] == b"GIF89a" and gif.n_frames == 4
        status, body, _ = fetch(url, "/gif", **frame)
        assert Image.open(io.BytesIO(body)).n_frames == STEPS
        assert fetch(url, "/gif", **frame, fps=0)[0] == 400  # parameters still validated
    log = next(tmp_path.glob("tensorboard-*.log")).read_text()
    assert "Traceback" not in log, log[-3000:]
