"""The Attention-IoU of two attention maps, and its chance level.

Serianni et al., "Attention-IoU: Examining Biases in CelebA using Attention Maps" (CVPR 2025). Two
non-negative maps are each scaled to sum 1 (``p`` and ``q``); their Attention-IoU is

    Σ p·q / Σ ((p + q) / 2)²

It is symmetric, lies in [0, 1], is 1 exactly when the maps are proportional and 0 when their
supports are disjoint. For two binary masks of equal area with IoU ``J`` it is ``4J / (1 + 3J)``, and
for a uniform map against a region covering a fraction ``f`` of the image it is ``4f / (1 + 3f)``:
the chance level, the score of a model that looks everywhere alike.
"""

from __future__ import annotations

import torch


def attention_iou(p, q) -> torch.Tensor:
    """The Attention-IoU of each pair of maps.

    Args:
        p, q: non-negative maps ``(B, H, W)`` (anything ``torch.as_tensor`` takes; a single
            ``(H, W)`` map is broadcast against a batch).

    Returns:
        ``(B,)`` float64 scores in [0, 1]; NaN where either map is empty (sums to 0).

    Raises:
        ValueError: the shapes do not match, a map has a negative or non-finite value.
    """
    p, q = _as_maps(p, "p"), _as_maps(q, "q")
    try:
        p, q = torch.broadcast_tensors(p, q)
    except RuntimeError:
        raise ValueError(
            f"p and q must have the same shape (B, H, W), got {tuple(p.shape)} and {tuple(q.shape)}"
        ) from None
    p_sum, q_sum = p.sum(dim=(1, 2)), q.sum(dim=(1, 2))
    empty = (p_sum <= 0) | (q_sum <= 0)
    p = p / torch.where(empty, 1.0, p_sum)[:, None, None]
    q = q / torch.where(empty, 1.0, q_sum)[:, None, None]
    overlap = (p * q).sum(dim=(1, 2))
    mean_square = (((p + q) / 2) ** 2).sum(dim=(1, 2))
    score = overlap / torch.where(empty, 1.0, mean_square)
    return torch.where(empty, torch.nan, score.clamp(0.0, 1.0))


def chance_level(regions) -> torch.Tensor:
    """The Attention-IoU of a uniform map with each region: ``4f / (1 + 3f)`` for a binary region
    covering a fraction ``f`` of the image (``4 / (3 + N Σ q²)`` in general, ``q`` the region
    scaled to sum 1 over its ``N`` pixels). NaN for an empty region.

    Args:
        regions: non-negative maps or masks ``(B, H, W)``.

    Returns:
        ``(B,)`` float64.
    """
    regions = _as_maps(regions, "regions")
    return attention_iou(torch.ones_like(regions), regions)


def _as_maps(maps, name: str) -> torch.Tensor:
    maps = torch.as_tensor(maps)
    if maps.is_complex():
        raise ValueError(f"{name} must hold real numbers, got {maps.dtype}")
    maps = maps.detach().to(torch.float64)
    if maps.dim() == 2:
        maps = maps.unsqueeze(0)
    if maps.dim() != 3:
        raise ValueError(f"{name} must be maps of shape (B, H, W) (or one (H, W) map), got shape {tuple(maps.shape)}")
    if not torch.isfinite(maps).all():
        raise ValueError(f"{name} holds NaN or infinite values; attention maps and masks must be finite")
    if (maps < 0).any():
        raise ValueError(
            f"{name} holds negative values; Attention-IoU compares non-negative maps (apply ReLU or take a mask)"
        )
    return maps
