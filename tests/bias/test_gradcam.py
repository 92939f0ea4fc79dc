"""GradCAM with a hook and torch.autograd.grad: its identities, and a model left exactly as it was."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from xray_tb import bias
from xray_tb.bias.planted import planted_images


class GapHead(nn.Module):
    """conv -> ReLU at the input's size, global average pooling, a linear head."""

    def __init__(self, channels: int = 5, outputs: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.act = nn.ReLU()
        self.head = nn.Linear(channels, outputs)

    def forward(self, x):
        return self.head(self.act(self.conv(x)).mean(dim=(2, 3)))


def red_patch_detector() -> nn.Sequential:
    """A 1x1 conv firing on red pixels only (R - G - B - 0.5 > 0), pooled, one logit."""
    conv = nn.Conv2d(3, 1, 1)
    head = nn.Linear(1, 1)
    with torch.no_grad():
        conv.weight.copy_(torch.tensor([1.0, -1.0, -1.0]).view(1, 3, 1, 1))
        conv.bias.fill_(-0.5)
        head.weight.fill_(10.0)
        head.bias.fill_(-0.1)
    return nn.Sequential(conv, nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), head)


def min_max(maps: torch.Tensor) -> torch.Tensor:
    low = maps.amin(dim=(1, 2), keepdim=True)
    span = maps.amax(dim=(1, 2), keepdim=True) - low
    return torch.where(span > 0, (maps - low) / span.clamp_min(1e-30), torch.zeros_like(maps))


@pytest.mark.parametrize("k", [0, 1, 2])
def test_gap_linear_head_map_is_relu_of_signed_weighted_channels(k):
    torch.manual_seed(0)
    model = GapHead()
    x = torch.randn(6, 3, 8, 8)
    maps = bias.gradcam(model, "act", x, k)
    with torch.no_grad():
        activation = model.act(model.conv(x))
        z = model(x)[:, k]
        expected = F.relu(torch.sign(z).view(-1, 1, 1) * torch.einsum("c,bchw->bhw", model.head.weight[k], activation))
    assert maps.shape == (6, 8, 8) and maps.dtype == torch.float32
    assert torch.allclose(maps, min_max(expected), atol=1e-6)
    assert torch.all(maps.amax(dim=(1, 2)) == 1.0)


def test_multiclass_targets_use_the_logit_itself():
    torch.manual_seed(1)
    model = GapHead()
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        activation = model.act(model.conv(x))
        predicted = model(x).argmax(dim=1)
    expected = torch.stack(
        [F.relu(torch.einsum("c,chw->hw", model.head.weight[c], a)) for c, a in zip(predicted, activation)]
    )
    assert torch.allclose(bias.gradcam(model, "act", x, "pred"), min_max(expected), atol=1e-6)
    per_image = bias.gradcam(model, "act", x, predicted, multilabel=False)
    assert torch.allclose(per_image, bias.gradcam(model, "act", x, "pred"), atol=1e-6)
    raw = bias.gradcam(model, "act", x, 2, multilabel=False)
    with torch.no_grad():
        plain = F.relu(torch.einsum("c,bchw->bhw", model.head.weight[2], activation))
    assert torch.allclose(raw, min_max(plain), atol=1e-6)


def test_red_patch_detector_map_matches_the_patch():
    images, labels, masks = planted_images(40, rho=0.5, seed=3)
    red = labels[:, 1] == 1
    model = red_patch_detector()
    maps = bias.gradcam(model, "1", images[red], 0)
    scores = bias.attention_iou(maps, masks[red, 0])
    assert scores.min().item() >= 0.99
    assert bias.mask_score(model, "1", images[red], masks[red], 0)[:, 0].min().item() >= 0.99


def test_heatmap_score_of_an_output_with_itself_is_one():
    torch.manual_seed(2)
    model, x = GapHead(), torch.randn(3, 3, 8, 8)
    assert torch.allclose(bias.heatmap_score(model, "act", x, 1, 1), torch.ones(3, dtype=torch.float64), atol=1e-6)


class Untidy(nn.Module):
    """BatchNorm (running statistics), dropout (RNG) and an in-place ReLU after the explained layer."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.drop(self.relu(self.bn(self.conv(x))).mean(dim=(2, 3))))


def test_the_model_is_left_exactly_as_it_was():
    torch.manual_seed(3)
    model = Untidy()
    model.train()
    model.drop.eval()  # mixed flags stay mixed
    x = torch.randn(4, 3, 6, 6)
    model(x).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    flags = {name: m.training for name, m in model.named_modules()}
    hooks = {
        name: (dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m._backward_hooks))
        for name, m in model.named_modules()
    }
    rng = torch.get_rng_state()
    for layer in ("conv", "bn", None):
        maps = bias.gradcam(model, layer, x, 0)
        assert maps.shape == (4, 6, 6) and torch.isfinite(maps).all()
    assert all(torch.equal(p.grad, grads[name]) for name, p in model.named_parameters())
    assert all(torch.equal(b, buffers[name]) for name, b in model.named_buffers())
    assert {name: m.training for name, m in model.named_modules()} == flags
    assert {
        name: (dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m._backward_hooks))
        for name, m in model.named_modules()
    } == hooks
    assert torch.equal(torch.get_rng_state(), rng)


def test_the_in_place_relu_does_not_change_the_explained_output():
    torch.manual_seed(4)
    model = Untidy().eval()
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        activation = model.bn(model.conv(x))  # before the in-place ReLU
    activation.requires_grad_(True)
    z = model.head(F.relu(activation).mean(dim=(2, 3)))[:, 1]  # the same forward, out of place
    (grad,) = torch.autograd.grad(z.abs().sum(), activation)
    expected = F.relu((grad.mean(dim=(2, 3), keepdim=True) * activation).sum(dim=1)).detach()
    assert torch.allclose(bias.gradcam(model, "bn", x, 1), min_max(expected), atol=1e-6)


def test_frozen_parameters_and_no_grad_callers_still_get_maps():
    torch.manual_seed(5)
    model = GapHead()
    for p in model.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        maps = bias.gradcam(model, "act", torch.randn(2, 3, 8, 8), 0)
    assert maps.amax().item() == 1.0
    assert all(p.grad is None for p in model.parameters())


def test_default_layer_is_the_last_spatial_4d_output():
    from xray_tb.bias.planted import TinyCNN

    model = TinyCNN()
    assert bias.default_layer(model, torch.rand(1, 3, 32, 32)) == "features"
    gap = GapHead()
    assert bias.default_layer(gap, torch.rand(1, 3, 8, 8)) == "act"


def test_wrong_layers_and_targets_are_named():
    model = GapHead()
    x = torch.randn(2, 3, 8, 8)
    with pytest.raises(ValueError, match=r"unknown layer 'acts'; did you mean 'act'"):
        bias.gradcam(model, "acts", x, 0)
    with pytest.raises(ValueError, match="output is 4-D"):
        bias.gradcam(model, "head", x, 0)
    with pytest.raises(ValueError, match="not a submodule"):
        bias.gradcam(model, nn.ReLU(), x, 0)
    with pytest.raises(ValueError, match="3 outputs"):
        bias.gradcam(model, "act", x, 3)
    with pytest.raises(ValueError, match="'pred'"):
        bias.gradcam(model, "act", x, "predicted")
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        bias.gradcam(model, "act", torch.randn(3, 8, 8), 0)
    assert not any(m._forward_hooks for m in model.modules())


def test_a_layer_the_forward_never_calls_is_named():
    model = GapHead()
    model.unused = nn.Conv2d(3, 3, 1)
    with pytest.raises(ValueError, match="'unused' was not called"):
        bias.gradcam(model, "unused", torch.randn(1, 3, 8, 8), 0)
    assert not model.unused._forward_hooks
