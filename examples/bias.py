"""A planted bias, found with Attention-IoU and shown in the Xray tab.

Two tiny CNNs learn two attributes of generated 32×32 images: ``shape`` (a grey square or disc, the
core feature) and ``patch`` (a red or blue corner patch, the spurious one). In the first run the
patch agrees with the shape on every training image (rho = 1.0); in the second only by chance
(rho = 0.5). After each epoch, ``xray.attention_iou`` asks where each model looks for ``shape``, on a
balanced test set, and writes the answer into its run:

    python examples/bias.py --logdir runs/bias      # about 40 s on one CPU core
    tensorboard --logdir runs/bias                  # Xray tab, "Bias" view

The biased model looks at the patch: its ``shape`` map covers the patch mask far above chance, and
it is the same map as its ``patch`` map (heatmap score near 1). The unbiased one looks at the shape.
Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch.nn import functional as F

from xray_tb import Xray
from xray_tb.bias.planted import LABELS, REGIONS, TinyCNN, accuracy, batches, planted_images


def train_and_evaluate(logdir: str, rho: float, args) -> object:
    """Train a TinyCNN at ``rho`` with Xray attached; evaluate Attention-IoU after every epoch."""
    images, labels, _ = planted_images(args.train, rho, seed=args.seed + 1)
    test = planted_images(args.test, 0.5, seed=args.seed + 2)  # balanced: the patch says nothing
    torch.manual_seed(args.seed)
    model = TinyCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    shuffle = torch.Generator().manual_seed(args.seed)
    step = 0
    with Xray(model, input_size=(3, 32, 32), logdir=logdir, every=args.every) as xray:
        for epoch in range(args.epochs):
            order = torch.randperm(images.shape[0], generator=shuffle)
            for start in range(0, images.shape[0], args.batch_size):
                index = order[start : start + args.batch_size]
                optimizer.zero_grad()
                F.binary_cross_entropy_with_logits(model(images[index]), labels[index]).backward()
                xray.take_graphs(step)  # records only every --every steps
                optimizer.step()
                step += 1
            report = xray.attention_iou(
                batches(*test), target=0, protected=1, masks=list(REGIONS), names=LABELS, step=step - 1
            )
            patch = report.score("mask", "patch").subgroups["all"]
            print(
                f"  rho={rho} epoch {epoch + 1}: shape map on the patch {patch.mean:.3f} (chance {patch.chance:.3f}), "
                f"heatmap score {report.score('heatmap').subgroups['all'].mean:.3f}"
            )
    shape_accuracy, patch_accuracy = accuracy(model, test[0], test[1])
    print(f"  rho={rho}: test accuracy shape {shape_accuracy:.3f}, patch {patch_accuracy:.3f}")
    return report


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", default="runs/bias", help="parent of one run per rho (default: %(default)s)")
    parser.add_argument(
        "--rhos", type=float, nargs="+", default=[1.0, 0.5], help="training agreement rates (default: 1.0 0.5)"
    )
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--train", type=int, default=3000, help="training images per run")
    parser.add_argument("--test", type=int, default=1000, help="balanced test images")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--every", type=int, default=20, help="capture the layers every N steps (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)  # tiny convolutions: more threads only wait on each other

    reports = {}
    for rho in args.rhos:
        started = time.perf_counter()
        run = os.path.join(args.logdir, f"rho{rho}")
        print(f"training at rho={rho} into {run}")
        reports[rho] = train_and_evaluate(run, rho, args)
        print(f"  {time.perf_counter() - started:.1f} s\n\n{reports[rho]}\n")
    print(f"Open the tab: tensorboard --logdir {args.logdir}   (Xray tab, Bias view)")


if __name__ == "__main__":
    main()
