"""The traced graph drives the recorder: activations (modules and functionals), the draft, the summary."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from PIL import Image, ImageSequence  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from tests import models  # noqa: E402
from xray_tb import Xray, open_run  # noqa: E402
from xray_tb.capture.plan import normalize_plan  # noqa: E402

ACTIVATIONS = {
    "relu": lambda x: F.relu(x),
    "gelu": lambda x: F.gelu(x),
    "leaky_relu": lambda x: F.leaky_relu(x, negative_slope=0.3),
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "softmax": lambda x: F.softmax(x, dim=1),
    "ELU module": nn.ELU(alpha=0.5),
}


class LinearThen(nn.Module):
    def __init__(self, activation):
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.activation = activation
        self.head = nn.Linear(5, 2)

    def forward(self, x):
        return self.head(self.activation(self.fc(x)))


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_is_the_op_that_directly_follows(tmp_path, name):
    torch.manual_seed(0)
    model, x = LinearThen(ACTIVATIONS[name]), torch.randn(4, 6)
    with Xray(model, x, logdir=str(tmp_path)) as xray:
        assert xray.plan["fc"]["activation"] is True  # drafted: linear layers record their activation
        model(x).sum().backward()
        xray.take_graphs(0)
        values, header = xray.load("fc", "activation", 0)
    expected = ACTIVATIONS[name](model.fc(x)).detach()
    torch.testing.assert_close(values, expected[header.indices])


def test_functional_block_draft_and_recording(tmp_path):
    torch.manual_seed(0)
    model, x = models.FunctionalNet(), torch.randn(2, 4)
    with Xray(model, x, logdir=str(tmp_path)) as xray:
        draft = xray.draft_plan()
        assert draft["block.fc"]["activation"] and not draft["stem"]["activation"] and not draft["head"]["activation"]
        assert "block" not in draft  # containers are not layers
        model(x).sum().backward()
        xray.take_graphs(0)
        values, _ = xray.load("block.fc", "activation", 0)
    torch.testing.assert_close(values, F.relu(model.block.fc(model.stem(x))).detach())


def test_conv_bn_relu_draft_and_activation(tmp_path):
    torch.manual_seed(0)
    model, x = models.ConvBnRelu(), models.ConvBnRelu.example_input()
    with Xray(model, x, logdir=str(tmp_path)) as xray:
        assert xray.plan["features.0"] == {"weight": False, "weight_grad": False, "bias": False, "bias_grad": False, "output": True, "activation": True, "grad": False}
        model(x).sum().backward()
        xray.take_graphs(0)
        values, header = xray.load("features.0", "activation", 0)
    conv = model.features[0](x)
    expected = torch.relu(F.batch_norm(conv, None, None, model.features[1].weight, model.features[1].bias, training=True))
    torch.testing.assert_close(values, expected[0, header.indices].detach(), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("model_cls", [models.FunctionalNet, models.ResidualNet, models.TinyUNet, models.ReusedModule,
                                       models.InplaceReluNet, models.ConvBnRelu, models.LSTMClassifier, models.TinyTransformer],
                         ids=lambda cls: cls.__name__)
def test_the_drafted_plan_installed_unchecked_is_the_plan_validation_gives(tmp_path, model_cls):
    # Xray() installs its own draft without checking it layer by layer (valid by construction); the same
    # draft through validation, as set_plan() takes a user's plan, gives the same plan.
    torch.manual_seed(0)
    model = model_cls()
    with Xray(model, model_cls.example_input(), logdir=str(tmp_path)) as xray:
        installed = xray.plan
        assert installed == normalize_plan(xray.draft_plan(), xray.recording.graph, model)
        xray.set_plan(xray.draft_plan())
        assert xray.plan == installed


def test_unused_and_container_layers_get_clear_errors(tmp_path):
    with Xray(models.UnusedModule(), models.UnusedModule.example_input(), logdir=str(tmp_path)) as xray:
        assert "unused" not in xray.draft_plan()
        with pytest.raises(ValueError, match="'unused' is never called in the model's forward"):
            xray.set_plan(["unused"])
    with Xray(models.ConvBnRelu(), models.ConvBnRelu.example_input(), logdir=str(tmp_path)) as xray:
        with pytest.raises(ValueError, match="'features' is a container; plan its layers instead, e.g. features.0"):
            xray.set_plan(["features"])


def test_reused_module_records_its_first_call(tmp_path):
    torch.manual_seed(0)
    model, x = models.ReusedModule(), models.ReusedModule.example_input()
    with Xray(model, x, logdir=str(tmp_path), plan={"fc": {"output": True, "activation": True}}) as xray:
        model(x).sum().backward()
        xray.take_graphs(0)
        output, _ = xray.load("fc", "output", 0)
        activation, _ = xray.load("fc", "activation", 0)
    torch.testing.assert_close(output, model.fc(x).detach())
    torch.testing.assert_close(activation, torch.relu(model.fc(x)).detach())


def test_summary_shows_functional_ops_in_place(tmp_path):
    with Xray(models.FunctionalNet(), torch.randn(2, 4), logdir=str(tmp_path)) as xray:
        lines = xray.summary().splitlines()
    names = [line.split()[0] for line in lines if line.strip() and not line.startswith(("=", "Layer", "Total", "Nodes", "Edges"))]
    assert names[:5] == ["input:0", "stem", "block", "block.fc", "relu:0"]
    assert any("leaky_relu(negative_slope=0.2" in line for line in lines)


def test_load_from_memory_and_disk_show_and_gif(tmp_path):
    torch.manual_seed(0)
    model, x = models.LeNetDigits(), torch.randn(4, 1, 8, 8)
    weights = []
    with Xray(model, x, logdir=str(tmp_path / "run"), plan={"conv1": {"weight": True, "output": True}}) as xray:
        for step in range(3):
            model(x).sum().backward()
            xray.take_graphs(step)
            weights.append(model.conv1.weight.detach().clone())
            with torch.no_grad():
                model.conv1.weight.add_(torch.randn_like(model.conv1.weight))
        from_memory, header = xray.load("conv1", "weight", 2)
        from_disk, _ = xray.load("conv1", "weight", 0)
        figure = xray.show_last_graphs(save=str(tmp_path / "last.png"))
        gif = xray.save_gif("conv1", "weight", str(tmp_path / "conv1.gif"))
    torch.testing.assert_close(from_memory, weights[2][header.indices])
    torch.testing.assert_close(from_disk, weights[0][header.indices])
    torch.testing.assert_close(open_run(tmp_path / "run").load("conv1", "weight", 1)[0], weights[1][header.indices])
    assert figure is not None and len(np.unique(np.asarray(Image.open(tmp_path / "last.png").convert("RGB")).reshape(-1, 3), axis=0)) > 20
    frames = [np.asarray(frame.convert("RGB")) for frame in ImageSequence.Iterator(Image.open(gif))]
    assert len(frames) == 3 and not np.array_equal(frames[0], frames[-1])


def test_show_last_graphs_before_any_capture(tmp_path):
    with Xray(models.LeNetDigits(), input_size=(1, 8, 8), logdir=str(tmp_path)) as xray:
        with pytest.raises(RuntimeError, match="nothing captured yet"):
            xray.show_last_graphs()


def test_load_reads_new_captures_incrementally(tmp_path):
    torch.manual_seed(0)
    model, x = models.LeNetDigits(), torch.randn(4, 1, 8, 8)
    with Xray(model, x, logdir=str(tmp_path), plan={"fc1": {"weight": True}}) as xray:
        weights = {}
        for step in range(4):
            xray.take_graphs(step)
            weights[step] = model.fc1.weight.detach().clone()
            with torch.no_grad():
                model.fc1.weight.mul_(1.5)
            if step == 1:
                xray.load("fc1", "weight", 0)  # reads the event file once
        values, header = xray.load("fc1", "weight", 2)  # written after that read
    torch.testing.assert_close(values, weights[2][header.indices])
