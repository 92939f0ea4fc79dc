"""The two Attention-IoU scores of the paper, per image.

* The **mask score** compares an attribute's GradCAM map with ground-truth regions (where the hair,
  the glasses, the patch are): how much the model looks where it should, or where the bias is.
* The **heatmap score** compares the maps of two attributes on the same image: how much the model
  looks at the same place for the target and for the protected attribute.
"""

from __future__ import annotations

import torch
from torch import nn

from xray_tb.bias.gradcam import LayerLike, Target, gradcam, gradcam_maps
from xray_tb.bias.metric import attention_iou


def mask_score(
    model: nn.Module, layer: LayerLike, x: torch.Tensor, masks, target: Target, *, multilabel: bool = True
) -> torch.Tensor:
    """The Attention-IoU of ``target``'s GradCAM map with each region mask.

    Args:
        model, layer, x, target, multilabel: as for :func:`~xray_tb.bias.gradcam`.
        masks: non-negative region masks ``(B, R, H, W)`` at the input's size (R regions per image).

    Returns:
        ``(B, R)`` float64 scores; NaN for an empty mask (or an empty map).
    """
    maps = gradcam(model, layer, x, target, multilabel=multilabel)
    return masks_against(maps, masks)


def heatmap_score(
    model: nn.Module, layer: LayerLike, x: torch.Tensor, target_a: Target, target_b: Target, *, multilabel: bool = True
) -> torch.Tensor:
    """The Attention-IoU of the GradCAM maps of two targets on the same images (one forward pass).

    Returns:
        ``(B,)`` float64 scores; NaN where a map is empty.
    """
    map_a, map_b = gradcam_maps(model, layer, x, [target_a, target_b], multilabel=multilabel)
    return attention_iou(map_a, map_b)


def masks_against(maps: torch.Tensor, masks) -> torch.Tensor:
    """``(B, R)`` Attention-IoU of each map ``(B, H, W)`` with each of its masks ``(B, R, H, W)``."""
    masks = torch.as_tensor(masks)
    if masks.dim() != 4 or masks.shape[0] != maps.shape[0] or masks.shape[-2:] != maps.shape[-2:]:
        raise ValueError(
            f"masks must have shape (B, R, H, W) = ({maps.shape[0]}, R, {maps.shape[1]}, {maps.shape[2]}): one batch "
            f"of R region masks at the input's size; got {tuple(masks.shape)}"
        )
    batch, regions = masks.shape[:2]
    expanded = maps.unsqueeze(1).expand(batch, regions, *maps.shape[1:]).reshape(batch * regions, *maps.shape[1:])
    return attention_iou(expanded, masks.to(maps.device).reshape(batch * regions, *masks.shape[-2:])).reshape(
        batch, regions
    )
