"""Models for bench/bench_gpu_health.py, from torch.nn only (no torchvision, no transformers).

- :func:`conv16`: ``depth`` conv-BN-ReLU blocks on CIFAR-sized inputs, 10 classes.
- :func:`resnet50`: a standard ResNet-50 (torchvision's layout: bottleneck blocks [3, 4, 6, 3],
  widths 64..2048, stride on the 3x3 conv, BatchNorm, in-place ReLU), 1000 classes, for 224x224 inputs.
- :func:`gpt2_small`: a GPT-2-small-sized decoder-only transformer (12 layers, d_model 768, 12 heads,
  MLP 3072 with tanh GELU, pre-norm LayerNorm, learned positions, vocabulary 50257, head tied to the
  token embedding by default), causal attention through ``F.scaled_dot_product_attention(is_causal=True)``,
  no dropout.

:func:`workload` bundles a model with what the bench needs to train it: random batches made on the
device (inputs and targets), the input spec for ``Xray(...)``, the loss and the optimizer.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch
from torch import nn
from torch.nn import functional as F

MODELS = ("conv16", "resnet50", "gpt2")
#: GPT-2's vocabulary size.
GPT2_VOCAB = 50257


# ----------------------------------------------------------------------------------------- conv16


def conv16(depth: int = 16, classes: int = 10) -> nn.Module:
    """``depth`` conv-BN-ReLU blocks of 64 channels, global pooling, a linear classifier."""
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes))


# --------------------------------------------------------------------------------------- ResNet-50


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride), 1x1 expand by 4, plus the shortcut (projected when the
    shape changes)."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: Optional[nn.Module] = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = self.downsample(x) if self.downsample is not None else x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, blocks: tuple[int, ...] = (3, 4, 6, 3), classes: int = 1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        self.relu, self.maxpool = nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        cin, stages = 64, []
        for width, count, stride in zip((64, 128, 256, 512), blocks, (1, 2, 2, 2)):
            layer = []
            for i in range(count):
                layer.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * Bottleneck.expansion
            stages.append(nn.Sequential(*layer))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(cin, classes)
        for module in self.modules():  # torchvision's initialisation
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50(classes: int = 1000) -> nn.Module:
    """A standard ResNet-50: 25.6M parameters with 1000 classes."""
    return ResNet((3, 4, 6, 3), classes)


# ------------------------------------------------------------------------------------------ GPT-2


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        q, k, v = self.c_attn(x).split(d_model, dim=2)
        q, k, v = (t.view(batch, seq, self.heads, d_model // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(batch, seq, d_model))


class MLP(nn.Module):
    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.c_fc, self.gelu = nn.Linear(d_model, hidden), nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, hidden: int):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d_model), CausalSelfAttention(d_model, heads)
        self.ln_2, self.mlp = nn.LayerNorm(d_model), MLP(d_model, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token ids ``(batch, seq)`` (long) in, logits ``(batch, seq, vocab)`` out."""

    def __init__(self, layers: int = 12, d_model: int = 768, heads: int = 12, hidden: int = 3072,
                 vocab: int = GPT2_VOCAB, max_seq: int = 1024, tied: bool = True):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d_model), nn.Embedding(max_seq, d_model)
        self.h = nn.ModuleList(Block(d_model, heads, hidden) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.register_buffer("positions", torch.arange(max_seq), persistent=False)
        for name, parameter in self.named_parameters():  # GPT-2's initialisation
            if name.endswith("c_proj.weight"):
                nn.init.normal_(parameter, std=0.02 / (2 * layers) ** 0.5)
            elif parameter.dim() >= 2:
                nn.init.normal_(parameter, std=0.02)
            elif name.endswith(".bias"):
                nn.init.zeros_(parameter)
        if tied:
            self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(self.positions[: idx.shape[1]])
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def gpt2_small(layers: int = 12, seq: int = 1024, vocab: int = GPT2_VOCAB, tied: bool = True) -> nn.Module:
    """GPT-2 small (124M parameters tied, 163M untied) for sequences of up to ``seq`` tokens;
    ``layers`` shrinks it for smoke runs."""
    return GPT(layers=layers, max_seq=seq, vocab=vocab, tied=tied)


# --------------------------------------------------------------------------------------- workloads


@dataclasses.dataclass
class Workload:
    """A model to train on random batches, with what the bench needs around it."""

    #: One line for the report: the model and its input shape.
    description: str
    #: Samples (images or sequences) per batch.
    batch: int
    #: A new model instance (on the CPU; seeded by the caller).
    make_model: Callable[[], nn.Module]
    #: ``make_batch(generator) -> (inputs, targets)`` on the generator's device.
    make_batch: Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]]
    #: The keyword arguments that tell ``Xray(...)`` the input: ``input_size=`` or ``example_input=``.
    xray_input: Callable[[torch.device], dict]
    #: ``loss(output, targets)``: cross-entropy.
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    #: ``make_optimizer(parameters)``.
    make_optimizer: Callable[..., torch.optim.Optimizer]
    #: The bar on health-every1's on / off ratio that issue 16 sets for this model.
    bar: float


def _sgd(parameters) -> torch.optim.Optimizer:
    return torch.optim.SGD(parameters, lr=0.01, momentum=0.9)


def _image_batch(batch: int, image: int, classes: int):
    def make(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        device = generator.device
        return (torch.randn(batch, 3, image, image, device=device, generator=generator),
                torch.randint(0, classes, (batch,), device=device, generator=generator))
    return make


def _token_batch(batch: int, seq: int, vocab: int):
    def make(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, vocab, (batch, seq + 1), device=generator.device, generator=generator)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()  # next-token targets
    return make


def _next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def workload(model: str, *, batch: Optional[int] = None, image: Optional[int] = None, depth: int = 16,
             seq: int = 1024, layers: int = 12, tied: bool = True) -> Workload:
    """The workload for ``model`` (one of :data:`MODELS`); ``None`` picks the model's default."""
    if model == "conv16":
        batch, image = batch or 64, image or 32
        return Workload(f"conv16: {depth} conv-BN-ReLU blocks, {image}x{image} inputs", batch, lambda: conv16(depth),
                        _image_batch(batch, image, 10), lambda device: {"input_size": (3, image, image)},
                        F.cross_entropy, _sgd, 1.05)
    if model == "resnet50":
        batch, image = batch or 64, image or 224
        return Workload(f"ResNet-50, {image}x{image} inputs, 1000 classes", batch, resnet50,
                        _image_batch(batch, image, 1000), lambda device: {"input_size": (3, image, image)},
                        F.cross_entropy, _sgd, 1.03)
    if model == "gpt2":
        batch = batch or 8

        def example(device: torch.device) -> dict:
            ids = torch.randint(0, GPT2_VOCAB, (2, seq), generator=torch.Generator().manual_seed(0))
            return {"example_input": ids.to(device)}

        def adamw(parameters) -> torch.optim.Optimizer:
            return torch.optim.AdamW(parameters, lr=3e-4, weight_decay=0.1)

        head = "tied" if tied else "untied"
        return Workload(f"GPT-2 small: {layers} layers, d_model 768, {head} head, sequence {seq}", batch,
                        lambda: gpt2_small(layers, seq, tied=tied), _token_batch(batch, seq, GPT2_VOCAB), example,
                        _next_token_loss, adamw, 1.03)
    raise ValueError(f"model is one of {', '.join(MODELS)}, got {model!r}")
