"""A zoo of small models built from torch.nn only (no downloads), for tracer tests and benches.

Each class documents its expected input via ``example_input()``.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from examples import digits


class NestedSequential(nn.Sequential):
    """Sequential of Sequentials, three levels deep. Input: (2, 4)."""

    def __init__(self) -> None:
        super().__init__(
            OrderedDict(
                features=nn.Sequential(nn.Linear(4, 8), nn.ReLU()),
                head=nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.Tanh(), nn.Linear(8, 2))),
            )
        )

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(2, 4)


class FunctionalBlock(nn.Module):
    """A custom block: one Linear, then a chain of functional activations."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.fc(x))
        x = F.gelu(x)
        x = F.leaky_relu(x, negative_slope=0.2)
        x = torch.sigmoid(x)
        x = torch.tanh(x)
        return F.softmax(x, dim=1)


class FunctionalNet(nn.Module):
    """Linear -> FunctionalBlock -> Linear. Input: (2, 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 8)
        self.block = FunctionalBlock()
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.stem(x)))

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(2, 4)


class ResidualBlock(nn.Module):
    """conv-bn-relu-conv-bn, plus the block input, then F.relu."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


class ResidualNet(nn.Module):
    """stem conv -> ResidualBlock -> global average -> Linear. Input: (2, 3, 8, 8)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.block = ResidualBlock(4)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.block(self.stem(x)))
        return self.fc(torch.flatten(x, 1))

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(2, 3, 8, 8)


class TinyUNet(nn.Module):
    """Encoder, pool, bottleneck, upsample, torch.cat skip, decoder. Input: (1, 1, 8, 8)."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU())
        self.down = nn.MaxPool2d(2)
        self.mid = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.dec = nn.Sequential(nn.Conv2d(8, 4, 3, padding=1), nn.ReLU())
        self.out = nn.Conv2d(4, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.enc(x)
        x = self.up(self.mid(self.down(skip)))
        return self.out(self.dec(torch.cat([x, skip], dim=1)))

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(1, 1, 8, 8)


class ReusedModule(nn.Module):
    """The same Linear called twice, with torch.relu in between. Input: (2, 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.fc(x)))

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(2, 4)


class ParamFreeModules(nn.Module):
    """conv -> MaxPool2d -> AvgPool2d -> Identity -> Flatten -> Linear. Input: (1, 1, 8, 8)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.maxpool = nn.MaxPool2d(2)
        self.avgpool = nn.AvgPool2d(2)
        self.identity = nn.Identity()
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.identity(self.avgpool(self.maxpool(self.conv(x))))
        return self.fc(self.flatten(x))

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(1, 1, 8, 8)


class InplaceReluNet(nn.Module):
    """conv -> ReLU(inplace=True) -> x.flatten(1) -> Linear. Input: (2, 1, 4, 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.relu(self.conv(x)).flatten(1))

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(2, 1, 4, 4)


class InplaceOps(nn.Module):
    """Linear -> x.relu_() -> x.mul_(2) -> x[:, 0] = 0 (tensor in-place ops). Input: (2, 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc(x)
        x.relu_()
        x.mul_(2)
        x[:, 0] = 0
        return x

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(2, 4)


class TwoInputs(nn.Module):
    """forward(x, y=...): fc_x(x) + fc_y(y), y usually passed as a keyword. Inputs: (2, 4), (2, 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc_x = nn.Linear(4, 2)
        self.fc_y = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.fc_x(x) + self.fc_y(y)


class ConvBnRelu(nn.Module):
    """Sequential(conv, BatchNorm2d, ReLU) -> flatten -> Dropout -> Linear. Input: (4, 3, 6, 6)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(4 * 6 * 6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(self.features(x).view(x.size(0), -1)))

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(4, 3, 6, 6)


class LSTMClassifier(nn.Module):
    """LSTM (tuple output) -> last time step -> Linear. Input: (2, 5, 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 6, batch_first=True)
        self.fc = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.fc(out[:, -1])

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(2, 5, 3)


class TinyTransformer(nn.Module):
    """Linear embedding -> TransformerEncoderLayer -> mean over tokens -> Linear. Input: (2, 4, 6)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(6, 8)
        self.encoder = nn.TransformerEncoderLayer(8, nhead=2, dim_feedforward=16, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x)).mean(dim=1))

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(2, 4, 6)


class DictOutput(nn.Module):
    """Returns {"logits": ..., "features": ...}. Input: (2, 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 5)
        self.head = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        features = self.body(x)
        return {"logits": self.head(features), "features": features}

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(2, 4)


class TupleOutput(nn.Module):
    """Returns (a, b) from two heads on a shared body. Input: (2, 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 5)
        self.head_a = nn.Linear(5, 2)
        self.head_b = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(x)
        return self.head_a(h), self.head_b(h)

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(2, 4)


class NoGradSection(nn.Module):
    """A frozen Linear run under torch.no_grad(), then a trainable one. Input: (2, 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = nn.Linear(4, 4)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            x = torch.relu(self.frozen(x))
        return self.fc(x)

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(2, 4)


class UnusedModule(nn.Module):
    """Holds a Linear that forward never calls. Input: (2, 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(4, 2)
        self.unused = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(2, 4)


class LeNetDigits(digits.LeNetDigits):
    """The example's LeNet-style CNN for 1x8x8 images (sklearn digits). Input: (N, 1, 8, 8)."""

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(2, 1, 8, 8)


class Bottleneck(nn.Module):
    """ResNet bottleneck: 1x1 -> 3x3 (stride) -> 1x1 (x4), shared in-place ReLU, += shortcut."""

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


class ResNet50(nn.Module):
    """ResNet-50-sized network (bottlenecks 3-4-6-3, 25.6M params). Input: (N, 3, 224, 224)."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        channels = 64
        for index, (width, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]):
            layer = []
            for block in range(blocks):
                layer.append(Bottleneck(channels, width, stride if block == 0 else 1))
                channels = width * Bottleneck.expansion
            setattr(self, f"layer{index + 1}", nn.Sequential(*layer))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.randn(1, 3, 224, 224)


class TiedLanguageModel(nn.Module):
    """An embedding, a block, and a head whose weight is the embedding's (tied)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.block = nn.Linear(8, 8)
        self.head = nn.Linear(8, 20, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.block(self.emb(tokens))))
