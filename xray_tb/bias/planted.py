"""A planted bias, on generated images: a known answer for Attention-IoU (nothing is downloaded).

Each 32×32 colour image holds a grey shape near the centre, the core feature (``shape``: 1 for a
square, 0 for a disc), and an 8×8 coloured patch in one of the four corners, the spurious feature
(``patch``: 1 for red, 0 for blue). In training the patch agrees with the shape at rate ``rho``
(``rho=1``: always, so the patch alone predicts the label; ``rho=0.5``: independent); test sets are
balanced. A model trained at ``rho=1`` should look at the patch for ``shape``, one trained at
``rho=0.5`` at the shape.

    images, labels, masks = planted_images(2000, rho=1.0, seed=0)   # labels (N, 2): shape, patch
    model = TinyCNN(); train(model, images, labels, seed=0)
"""

from __future__ import annotations


import torch
from torch import nn
from torch.nn import functional as F

SIZE = 32  # image side, pixels
PATCH = 8  # corner patch side, pixels
LABELS = ("shape", "patch")
REGIONS = ("patch", "shape")  # the masks planted_images returns, in this order


def planted_images(count: int, rho: float, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``count`` generated images.

    Returns:
        ``images (N, 3, 32, 32)`` in [0, 1], ``labels (N, 2)`` float (shape, patch), and
        ``masks (N, 2, 32, 32)``: where the patch is and where the shape is.
    """
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho is the rate at which the patch agrees with the shape, from 0 to 1; got {rho!r}")
    g = torch.Generator().manual_seed(seed)
    shape = torch.randint(0, 2, (count,), generator=g)
    agrees = torch.rand(count, generator=g) < rho
    patch = torch.where(agrees, shape, 1 - shape)
    images = 0.05 + 0.15 * torch.rand(count, 3, SIZE, SIZE, generator=g)  # dim noise
    masks = torch.zeros(count, 2, SIZE, SIZE)
    rows = torch.arange(SIZE).view(SIZE, 1).float()
    cols = torch.arange(SIZE).view(1, SIZE).float()
    corners = torch.randint(0, 4, (count,), generator=g)
    sides = torch.randint(10, 15, (count,), generator=g)
    for i in range(count):
        side = int(sides[i])
        top, left = (int(v) for v in torch.randint(8, 25 - side, (2,), generator=g))
        if shape[i]:
            region = (rows >= top) & (rows < top + side) & (cols >= left) & (cols < left + side)
        else:
            centre_r, centre_c, radius = top + (side - 1) / 2, left + (side - 1) / 2, side / 2
            region = (rows - centre_r) ** 2 + (cols - centre_c) ** 2 <= radius**2
        grey = 0.6 + 0.4 * float(torch.rand((), generator=g))
        images[i][:, region] = grey
        masks[i, 1] = region.float()
        r0 = 0 if corners[i] < 2 else SIZE - PATCH
        c0 = 0 if corners[i] % 2 == 0 else SIZE - PATCH
        colour = torch.tensor([0.9, 0.1, 0.1]) if patch[i] else torch.tensor([0.1, 0.1, 0.9])
        images[i, :, r0 : r0 + PATCH, c0 : c0 + PATCH] = colour.view(3, 1, 1)
        masks[i, 0, r0 : r0 + PATCH, c0 : c0 + PATCH] = 1.0
    labels = torch.stack([shape, patch], dim=1).float()
    return images, labels, masks


class TinyCNN(nn.Module):
    """Three 3×3 convolutions (one 2× pooling), global average pooling and a linear head with one
    logit per attribute: a few thousand parameters, trained on CPU in seconds."""

    def __init__(self, outputs: int = len(LABELS), width: int = 24):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(width, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


def train(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    *,
    seed: int,
    epochs: int = 6,
    batch: int = 64,
    lr: float = 3e-3,
    on_epoch=None,
) -> list[float]:
    """Train ``model`` on the attributes with a binary cross-entropy per output (Adam, seeded
    shuffling). ``on_epoch(epoch, step, loss)`` is called after each epoch. Returns the epoch losses."""
    g = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    step = 0
    for epoch in range(epochs):
        order = torch.randperm(images.shape[0], generator=g)
        total = 0.0
        for start in range(0, images.shape[0], batch):
            index = order[start : start + batch]
            optimizer.zero_grad()
            loss = F.binary_cross_entropy_with_logits(model(images[index]), labels[index])
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * index.numel()
            step += 1
        losses.append(total / images.shape[0])
        if on_epoch is not None:
            on_epoch(epoch, step - 1, losses[-1])
    return losses


def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> list[float]:
    """The accuracy of each output (logit > 0 read as 1), in eval mode, the model's mode restored."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            predicted = (model(images) > 0).float()
    finally:
        model.train(was_training)
    return [float(v) for v in (predicted == labels).float().mean(dim=0)]


def batches(images: torch.Tensor, labels: torch.Tensor, masks: torch.Tensor, size: int = 100):
    """``(x, labels, masks)`` batches in order, as :func:`xray_tb.bias.evaluate` reads them."""
    for start in range(0, images.shape[0], size):
        yield images[start : start + size], labels[start : start + size], masks[start : start + size]


__all__ = ["planted_images", "TinyCNN", "train", "accuracy", "batches", "LABELS", "REGIONS"]
