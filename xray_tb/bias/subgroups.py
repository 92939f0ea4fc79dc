"""Per-image scores gathered by subgroup: target yes/no × protected yes/no, and all images.

A subgroup's score is the mean over its images, shown with its chance level (the mean over the same
images of what a uniform map would score), so a score is never read without its baseline. Images
whose score is NaN (an empty mask or map) are left out and not counted; with ``empty="zero"`` they
count as 0 instead, as the reference code does (its scores go through ``nan_to_num``).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from tb_plugin.bias_metadata import SUBGROUPS  # all images, then target (t) and protected (p) attribute 1 or 0

EMPTY_RULES = ("nan", "zero")


@dataclasses.dataclass(frozen=True)
class SubgroupStats:
    """One subgroup's score: the mean (NaN when nothing was scored), the standard deviation, the
    number of images scored, the number of images in the subgroup, and the chance level."""

    mean: float
    std: float
    count: int
    images: int
    chance: float

    def to_json(self) -> dict:
        """A JSON-able dict; NaN becomes None."""
        return {key: _finite_or_none(value) for key, value in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, document: dict) -> "SubgroupStats":
        nan = float("nan")
        return cls(
            mean=_or(document.get("mean"), nan),
            std=_or(document.get("std"), nan),
            count=int(document.get("count") or 0),
            images=int(document.get("images") or 0),
            chance=_or(document.get("chance"), nan),
        )


def subgroup_masks(target_labels, protected_labels) -> dict[str, torch.Tensor]:
    """``{subgroup: boolean (N,)}`` of the images in each subgroup; labels are read as 1 when > 0.5."""
    target = _as_flags(target_labels, "target_labels")
    protected = _as_flags(protected_labels, "protected_labels")
    if target.shape != protected.shape:
        raise ValueError(
            "target_labels and protected_labels must have one value per image each, "
            f"got {tuple(target.shape)} and {tuple(protected.shape)}"
        )
    return {
        "all": torch.ones_like(target),
        "t1p1": target & protected,
        "t1p0": target & ~protected,
        "t0p1": ~target & protected,
        "t0p0": ~target & ~protected,
    }


def subgroup_table(
    scores, target_labels, protected_labels, chance=None, *, empty: str = "nan"
) -> dict[str, SubgroupStats]:
    """The mean score of every subgroup.

    Args:
        scores: per-image scores ``(N,)``, NaN where nothing could be scored.
        target_labels, protected_labels: ``(N,)`` binary labels of the two attributes.
        chance: per-image chance levels ``(N,)`` (NaN where undefined); None leaves it NaN.
        empty: ``"nan"`` leaves NaN scores out; ``"zero"`` counts them as 0.

    Returns:
        ``{subgroup: SubgroupStats}`` for every key of :data:`SUBGROUPS`.
    """
    if empty not in EMPTY_RULES:
        raise ValueError(f"empty must be 'nan' (leave empty masks out) or 'zero' (count them as 0), got {empty!r}")
    scores = torch.as_tensor(scores, dtype=torch.float64).reshape(-1)
    chance = (
        torch.full_like(scores, float("nan"))
        if chance is None
        else torch.as_tensor(chance, dtype=torch.float64).reshape(-1)
    )
    groups = subgroup_masks(target_labels, protected_labels)
    if scores.shape != groups["all"].shape or chance.shape != scores.shape:
        raise ValueError(
            "scores, chance and labels must have one value per image, "
            f"got {scores.numel()}, {chance.numel()} and {groups['all'].numel()}"
        )
    if empty == "zero":
        scores, chance = scores.nan_to_num(0.0), chance.nan_to_num(0.0)
    table = {}
    for name in SUBGROUPS:
        members = groups[name]
        scored = members & ~torch.isnan(scores)
        values = scores[scored]
        baseline = chance[scored]
        baseline = baseline[~torch.isnan(baseline)]
        table[name] = SubgroupStats(
            mean=float(values.mean()) if values.numel() else math.nan,
            std=float(values.std(unbiased=False)) if values.numel() else math.nan,
            count=int(values.numel()),
            images=int(members.sum()),
            chance=float(baseline.mean()) if baseline.numel() else math.nan,
        )
    return table


def _as_flags(labels, name: str) -> torch.Tensor:
    labels = torch.as_tensor(labels)
    if labels.dim() != 1:
        labels = labels.reshape(-1) if labels.dim() == 2 and labels.shape[1] == 1 else labels
    if labels.dim() != 1:
        raise ValueError(f"{name} must hold one label per image (N,), got shape {tuple(labels.shape)}")
    return labels.to(torch.float64) > 0.5


def _finite_or_none(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _or(value, default: float) -> float:
    return default if value is None else float(value)
