"""The Attention-IoU evaluation pass: GradCAM maps over a loader, scored and gathered by subgroup."""

from __future__ import annotations

import operator
from typing import Callable, Iterable, Mapping, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from xray_tb.bias.gradcam import LayerLike, OutputOutOfRange, gradcam_maps, resolve_layer
from xray_tb.bias.metric import attention_iou, chance_level
from xray_tb.bias.report import Attribute, BiasReport, Examples, Score
from xray_tb.bias.scores import masks_against
from xray_tb.bias.subgroups import EMPTY_RULES, SUBGROUPS, subgroup_masks, subgroup_table

#: Region masks: names of the ``(B, R, H, W)`` masks a loader yields third, or ``{name: fn(x, labels) -> (B, H, W)}``.
MasksLike = Union[None, Sequence[str], Mapping[str, Callable]]


def evaluate(
    model: nn.Module,
    loader: Iterable,
    *,
    target: int,
    protected: int,
    masks: MasksLike = None,
    layer: LayerLike = None,
    names: Optional[Sequence[str]] = None,
    name: Optional[str] = None,
    target_output: Optional[int] = None,
    protected_output: Union[int, None, bool] = None,
    empty: str = "nan",
    examples: int = 4,
    max_batches: Optional[int] = None,
) -> BiasReport:
    """Score where ``model`` looks for the ``target`` attribute, by subgroup of ``target`` × ``protected``.

    Args:
        model: a multi-label model whose outputs are attribute logits; left as it was.
        loader: yields ``(x, labels)`` with images ``x (B, C, H, W)`` and binary ``labels (B, K)``, or
            ``(x, labels, masks)`` with ``masks (B, R, H, W)`` when ``masks`` names R regions.
        target, protected: columns of ``labels``.
        masks: the regions for the mask score: a list of R names (the loader yields the masks), or
            ``{name: fn(x, labels) -> (B, H, W)}``. None scores no mask.
        layer: the GradCAM layer (a name from ``named_modules()``); None takes the last 4-D one.
        names: a name for each column of ``labels`` (default ``"label k"``).
        name: the evaluation's name in the run (default ``"<target> vs <protected>"``).
        target_output, protected_output: the model outputs of the two attributes (default: their
            label columns); ``protected_output=False`` when the model has none (no heatmap score).
        empty: ``"nan"`` leaves images with an empty mask out; ``"zero"`` counts them as 0.
        examples: how many images to keep with their maps (one of each subgroup first).
        max_batches: stop after this many batches.

    Returns:
        A :class:`BiasReport`.
    """
    target, protected = _column(target, "target"), _column(protected, "protected")
    if torch.is_inference_mode_enabled():
        raise RuntimeError("attention_iou needs gradients (its maps are Grad-CAM's): call it outside torch.inference_mode() "
                           "(under torch.no_grad() it works: gradients are switched on inside)")
    if empty not in EMPTY_RULES:
        raise ValueError(f"empty must be 'nan' (leave empty masks out) or 'zero' (count them as 0), got {empty!r}")
    examples = _count(examples, "examples")
    if not isinstance(loader, Iterable) or isinstance(loader, (str, bytes, torch.Tensor)):
        raise TypeError(f"loader must yield batches (x, labels) or (x, labels, masks), such as a DataLoader or a list of "
                        f"tuples; got {type(loader).__name__}")
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"name must be a non-empty string (the evaluation's name in the run), got {name!r}")
    names_of = _namer(names)
    target_attr = Attribute(
        target, names_of(target), target if target_output is None else _column(target_output, "target_output")
    )
    if protected_output is False:
        protected_out = None
    else:
        protected_out = (
            protected
            if protected_output is None or protected_output is True
            else _column(protected_output, "protected_output")
        )
    protected_attr = Attribute(protected, names_of(protected), protected_out)
    region_names = _region_names(masks)
    device = next((p.device for p in model.parameters()), None)

    per_image: dict[str, list] = {
        key: [] for key in ("target", "protected", "heatmap", "heatmap_chance", "masks", "mask_chance")
    }
    collector = _ExampleCollector(examples)
    layer_name = None
    for batch_index, batch in enumerate(loader):
        if max_batches is not None and batch_index >= max_batches:
            break
        x, labels, given_masks = _unpack(batch, masks)
        if device is not None:
            x = x.to(device)
        labels = _check_labels(labels, x, target, protected)
        if layer_name is None:
            _, layer_name = resolve_layer(model, layer, x)
        outputs = [target_attr.output] + ([protected_attr.output] if protected_attr.output is not None else [])
        try:
            maps = gradcam_maps(model, layer_name, x, outputs)
        except OutputOutOfRange as error:
            raise _output_out_of_range(error, outputs, target_output, protected_output) from None
        per_image["target"].append(labels[:, target])
        per_image["protected"].append(labels[:, protected])
        if protected_attr.output is not None:
            per_image["heatmap"].append(attention_iou(maps[0], maps[1]))
            per_image["heatmap_chance"].append(chance_level(maps[1]))
        if region_names:
            regions = _regions(masks, given_masks, x, labels, region_names)
            per_image["masks"].append(masks_against(maps[0], regions))
            per_image["mask_chance"].append(
                chance_level(regions.reshape(-1, *regions.shape[-2:]).to(maps[0].device)).reshape(regions.shape[:2])
            )
        collector.offer(x, labels[:, [target, protected]], maps)

    if layer_name is None:
        raise ValueError("the loader yielded no batch; give it at least one (x, labels)")
    target_labels = torch.cat(per_image["target"])
    protected_labels = torch.cat(per_image["protected"])
    scores = []
    if region_names:
        mask_scores, mask_chance = torch.cat(per_image["masks"]), torch.cat(per_image["mask_chance"])
        for r, region in enumerate(region_names):
            table = subgroup_table(mask_scores[:, r], target_labels, protected_labels, mask_chance[:, r], empty=empty)
            scores.append(Score("mask", region, table))
    if protected_attr.output is not None:
        table = subgroup_table(
            torch.cat(per_image["heatmap"]),
            target_labels,
            protected_labels,
            torch.cat(per_image["heatmap_chance"]),
            empty=empty,
        )
        scores.append(Score("heatmap", None, table))
    map_names = [target_attr.name] + ([protected_attr.name] if protected_attr.output is not None else [])
    return BiasReport(
        evaluation=name if name is not None else f"{target_attr.name} vs {protected_attr.name}",
        layer=layer_name,
        target=target_attr,
        protected=protected_attr,
        images=int(target_labels.numel()),
        empty=empty,
        scores=scores,
        examples=collector.examples(map_names),
    )


class _ExampleCollector:
    """Keeps up to ``limit`` images with their maps: one of each subgroup first, then the first ones."""

    def __init__(self, limit: int):
        self.limit = limit
        self.chosen: dict[str, tuple] = {}
        self.spare: list[tuple] = []
        self.seen = 0

    def offer(self, x: torch.Tensor, labels: torch.Tensor, maps: list[torch.Tensor]) -> None:
        if self.limit == 0 or (len(self.chosen) >= min(self.limit, 4) and len(self.spare) >= self.limit):
            self.seen += x.shape[0]
            return
        groups = subgroup_masks(labels[:, 0], labels[:, 1])
        for i in range(x.shape[0]):
            group = next(name for name in SUBGROUPS[1:] if groups[name][i])
            item = (
                self.seen + i,
                group,
                labels[i].round().to(torch.int64).tolist(),
                _display_image(x[i]),
                [m[i].cpu() for m in maps],
            )
            if group not in self.chosen and len(self.chosen) < self.limit:
                self.chosen[group] = item
            elif len(self.spare) < self.limit:
                self.spare.append(item)
        self.seen += x.shape[0]

    def examples(self, map_names: list[str]) -> Optional[Examples]:
        items = sorted(self.chosen.values(), key=lambda item: SUBGROUPS.index(item[1]))
        items += self.spare[: self.limit - len(items)]
        if not items:
            return None
        return Examples(
            images=np.stack([item[3] for item in items]),
            maps=np.stack([torch.stack(item[4]).numpy().astype(np.float32) for item in items]),
            map_names=map_names,
            labels=[item[2] for item in items],
            subgroups=[item[1] for item in items],
            indices=[item[0] for item in items],
        )


def _display_image(image: torch.Tensor) -> np.ndarray:
    """An image ``(C, H, W)`` as ``(H, W, 3)`` uint8, scaled to its own range (inputs are often normalised)."""
    image = image.detach().float().cpu()
    if image.shape[0] == 3:
        rgb = image
    elif image.shape[0] == 1:
        rgb = image.expand(3, *image.shape[1:])
    else:
        rgb = image.mean(dim=0, keepdim=True).expand(3, *image.shape[1:])
    low, high = float(rgb.min()), float(rgb.max())
    scaled = (rgb - low) / (high - low) if high > low else torch.zeros_like(rgb)
    return (scaled.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)


def _unpack(batch, masks: MasksLike):
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ValueError(f"the loader must yield (x, labels) or (x, labels, masks); got {type(batch).__name__}")
    x, labels = batch[0], batch[1]
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(
            "the loader's x must be images (B, C, H, W), got "
            f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}"
        )
    given = None
    if masks is not None and not isinstance(masks, Mapping):
        if len(batch) < 3:
            raise ValueError(
                "masks= names regions, so the loader must yield (x, labels, masks) with masks (B, R, H, W)"
            )
        given = torch.as_tensor(batch[2])
    return x, labels, given


def _output_out_of_range(error: OutputOutOfRange, outputs: list, target_output, protected_output) -> ValueError:
    """The error naming the argument whose model output does not exist."""
    index = outputs[error.position]
    if error.position == 0:
        given = f"target_output={index}" if target_output is not None else f"target={index} (its model output, by default)"
        fix = "pass target_output= the model's output of the target attribute"
    else:
        given = f"protected_output={index}" if protected_output not in (None, True) else f"protected={index} (its model output, by default)"
        fix = "pass protected_output= the model's output of the protected attribute, or protected_output=False when it has none"
    return ValueError(f"{given} is past the model's {error.outputs} outputs (0 to {error.outputs - 1}): {fix}")


def _check_labels(labels, x: torch.Tensor, target: int, protected: int) -> torch.Tensor:
    labels = torch.as_tensor(labels)
    if labels.dim() != 2 or labels.shape[0] != x.shape[0]:
        raise ValueError(
            f"labels must be (B, K) binary attributes, one row per image ({x.shape[0]}), "
            f"got shape {tuple(labels.shape)}"
        )
    for column, role in ((target, "target"), (protected, "protected")):
        if column >= labels.shape[1]:
            raise ValueError(
                f"{role}={column} but the labels have {labels.shape[1]} columns (0 to {labels.shape[1] - 1})"
            )
    labels = labels.detach().float().cpu()
    for column, role in ((target, "target"), (protected, "protected")):
        values = labels[:, column]
        if not ((values == 0) | (values == 1)).all():
            found = sorted({float(v) for v in values[(values != 0) & (values != 1)][:5].tolist()})
            raise ValueError(f"the {role} attribute (labels column {column}) must be binary, 0 or 1; got {found}: "
                             "threshold or map it to 0/1 first")
    return labels


def _regions(masks: MasksLike, given, x, labels, region_names: list[str]) -> torch.Tensor:
    if given is None:
        computed = {name: torch.as_tensor(fn(x, labels)).float() for name, fn in masks.items()}
        for name, mask in computed.items():
            if mask.dim() != 3:
                raise ValueError(
                    f"masks={{{name!r}: fn}}: fn(x, labels) must return one (B, H, W) mask per image, "
                    f"got {tuple(mask.shape)}" + ("; drop the channel dimension (mask[:, 0])" if mask.dim() == 4 and mask.shape[1] == 1 else "")
                )
        regions = torch.stack(list(computed.values()), dim=1)
    else:
        regions = given.float()
    if regions.dim() != 4 or regions.shape[1] != len(region_names):
        raise ValueError(
            f"the masks of a batch must be (B, R, H, W) with R = {len(region_names)} regions "
            f"({', '.join(region_names)}); got {tuple(regions.shape)}"
        )
    return regions


def _region_names(masks: MasksLike) -> list[str]:
    if masks is None:
        return []
    if isinstance(masks, Mapping):
        if not all(callable(fn) for fn in masks.values()):
            raise TypeError("masks={name: fn} takes functions fn(x, labels) returning (B, H, W) masks")
        names = list(masks)
    elif isinstance(masks, str) or not isinstance(masks, Sequence):
        raise TypeError(
            "masks must be a list of region names (the loader yields the masks) or {name: fn(x, labels)}, "
            f"got {masks!r}"
        )
    else:
        names = list(masks)
    if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise ValueError(f"masks must name each region once with a non-empty string, got {names!r}")
    return names


def _namer(names: Optional[Sequence[str]]) -> Callable[[int], str]:
    if names is None:
        return lambda column: f"label {column}"
    names = list(names)
    return lambda column: str(names[column]) if column < len(names) else f"label {column}"


def _column(value, what: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__") or operator.index(value) < 0:
        raise ValueError(f"{what} must be a column index (a whole number from 0), got {value!r}")
    return operator.index(value)


def _count(value, what: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__") or operator.index(value) < 0:
        raise ValueError(f"{what} must be a whole number from 0, got {value!r}")
    return operator.index(value)
