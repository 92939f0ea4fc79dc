"""Train a LeNet-style CNN on scikit-learn's bundled 8x8 digits with Xray recording.

    python examples/digits.py --logdir runs/digits
    tensorboard --logdir runs        # then open the Xray tab

No download: the digits ship with scikit-learn.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter

from xray_tb import Xray


class LeNetDigits(nn.Module):
    """conv → ReLU → pool, twice, then three linear layers; for 1x8x8 inputs."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 16, 3, padding=1)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(16 * 2 * 2, 64)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(64, 32)
        self.relu4 = nn.ReLU()
        self.fc3 = nn.Linear(32, classes)

    def forward(self, x):
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        x = self.relu3(self.fc1(self.flatten(x)))
        return self.fc3(self.relu4(self.fc2(x)))


def digits_loader(batch_size: int, seed: int) -> DataLoader:
    """The 1,797 8x8 digits bundled with scikit-learn, scaled to [0, 1], shuffled with ``seed``."""
    from sklearn.datasets import load_digits  # imported here so the model can be imported without sklearn

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long)
    return DataLoader(TensorDataset(images, labels), batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", default="runs/digits", help="run directory (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None, help="stop after this many optimizer steps")
    parser.add_argument("--every", type=int, default=10, help="capture every N steps (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default: %(default)s)")
    parser.add_argument("--captures", type=int, default=None, help="capture about this many times over the training (overrides --every)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    model = LeNetDigits()
    loader = digits_loader(args.batch_size, args.seed)
    if args.captures:
        total = len(loader) * args.epochs if args.steps is None else min(args.steps, len(loader) * args.epochs)
        args.every = max(1, total // args.captures)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    writer = SummaryWriter(args.logdir)

    xray = Xray(model, input_size=(1, 8, 8), writer=writer)
    plan = xray.draft_plan()  # conv: output + activation; linear: activation
    for layer in ("conv1", "conv2", "fc1"):
        plan[layer].update(weight=True, weight_grad=True, grad=True)
    plan["fc1"].update(bias=True, bias_grad=True)
    plan["fc3"].update(output=True, grad=True)
    xray.set_plan(plan)

    step = 0
    for _epoch in range(args.epochs):
        for images, labels in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            if step % args.every == 0:
                xray.take_graphs(step)
                writer.add_scalar("train/loss", loss.item(), step)
            optimizer.step()
            step += 1
            if args.steps is not None and step >= args.steps:
                break
        if args.steps is not None and step >= args.steps:
            break
    xray.close()
    writer.close()
    print(f"trained {step} steps; Xray wrote {args.logdir}")


if __name__ == "__main__":
    main()
