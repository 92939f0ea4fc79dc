"""GradCAM attention maps, taken with one forward hook and ``torch.autograd.grad``.

For a layer with output ``A`` (``B × C × h × w``) and a scalar ``s`` per image, the map is
``ReLU(Σ_c α_c A_c)`` with ``α_c`` the spatial mean of ``∂s/∂A_c``, upsampled bilinearly to the
input's size and min-max scaled to [0, 1] per image (a map that is constant, all zero after the ReLU
say, becomes all zero: an empty map). The scalar is ``|z_k|`` for output ``k`` of a multi-label model
(the evidence for attribute ``k``, whichever way it points), and the class logit for a multi-class
model (the predicted class for ``target="pred"``).

The model is left exactly as it was: the forward runs in eval mode inside
:func:`xray_tb.trace.state.preserved` (train/eval flags, buffers and RNG restored, any hook it registered
removed), ``torch.autograd.grad`` leaves every ``.grad`` alone, and the hook is removed even when the
forward fails.
"""

from __future__ import annotations

from typing import Sequence, Union

import torch
from torch import nn
from torch.nn import functional as F

from xray_tb.trace.state import preserved
from tb_plugin.close_matches import close_matches

#: What a target may be: an output index, ``"pred"`` (the argmax class), or one index per image.
Target = Union[int, str, torch.Tensor]
LayerLike = Union[str, nn.Module, None]


def gradcam(
    model: nn.Module, layer: LayerLike, x: torch.Tensor, target: Target, *, multilabel: bool = True
) -> torch.Tensor:
    """GradCAM maps of ``target`` at ``layer`` for a batch of images.

    Args:
        model: the model; it is left as it was (see the module docstring).
        layer: a dotted name from ``model.named_modules()`` (``"features.6"``), the module itself, or
            None for the last layer whose output is 4-D with a spatial size above 1.
        x: images ``(B, C, H, W)``.
        target: an output index ``k`` (``|z_k|`` when ``multilabel``, else ``z_k``), ``"pred"``
            (the logit of the argmax class), or a tensor ``(B,)`` of indices, one per image.
        multilabel: whether the outputs are independent attributes (the default, as in the
            Attention-IoU paper) rather than the classes of one softmax.

    Returns:
        ``(B, H, W)`` float32 maps in [0, 1], detached, on ``x``'s device.
    """
    return gradcam_maps(model, layer, x, [target], multilabel=multilabel)[0]


def gradcam_maps(
    model: nn.Module, layer: LayerLike, x: torch.Tensor, targets: Sequence[Target], *, multilabel: bool = True
) -> list[torch.Tensor]:
    """:func:`gradcam` of several targets from one forward pass: one ``(B, H, W)`` map per target."""
    x = _check_images(x)
    targets = list(targets)
    if not targets:
        raise ValueError("targets is empty; give at least one output index or 'pred'")
    module, name = resolve_layer(model, layer, x)
    taken: dict[str, torch.Tensor] = {}

    def take(module: nn.Module, args: tuple, output):
        if not isinstance(output, torch.Tensor) or output.dim() != 4:
            shape = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
            raise ValueError(f"GradCAM needs a layer whose output is 4-D (B, C, h, w); layer {name!r} gives {shape}")
        # A leaf of our own: the gradient is asked with respect to it, whatever requires grad upstream,
        # and ops downstream (an in-place ReLU) work on a copy.
        activation = output.detach().requires_grad_(True)
        taken["A"] = activation  # a module called twice: its last call
        return activation.clone()

    with preserved(model), torch.enable_grad():
        model.eval()
        handle = module.register_forward_hook(take)
        try:
            output = model(x)
        finally:
            handle.remove()
        if "A" not in taken:
            raise ValueError(f"layer {name!r} was not called in the model's forward, so it has no attention map")
        logits = _logits(output)
        activation = taken.pop("A")
        scores = []
        for position, target in enumerate(targets):
            try:
                scores.append(_scores(logits, target, multilabel))
            except OutputOutOfRange as error:
                error.position = position  # which of ``targets``: the caller names its argument
                raise
        maps = []
        for index, score in enumerate(scores):
            (grad,) = torch.autograd.grad(
                score.sum(), activation, retain_graph=index < len(scores) - 1, allow_unused=True
            )
            if grad is None:
                raise ValueError(
                    f"the model's output does not depend on layer {name!r}; pick a layer on the path to the output"
                )
            maps.append(_cam(activation.detach(), grad, x.shape[-2:]))
    return maps


def resolve_layer(model: nn.Module, layer: LayerLike, x: torch.Tensor = None) -> tuple[nn.Module, str]:
    """``(module, name)`` of ``layer`` in ``model``; None picks :func:`default_layer` (which needs ``x``).

    Raises:
        ValueError: an unknown name (naming close matches), or a module that is not part of ``model``.
    """
    named = dict(model.named_modules())
    if layer is None:
        if x is None:
            raise ValueError("layer=None picks the last 4-D layer from a forward pass, so give the input too")
        name = default_layer(model, x)
        return named[name], name
    if isinstance(layer, nn.Module):
        for name, module in named.items():
            if module is layer:
                return module, name
        raise ValueError(
            f"the {type(layer).__name__} given as layer is not a submodule of the model; "
            "give a name from model.named_modules()"
        )
    if not isinstance(layer, str):
        raise TypeError(
            "layer must be a name from model.named_modules(), a module of the model, or None; "
            f"got {type(layer).__name__}"
        )
    if layer not in named or layer == "":
        names = [name for name in named if name]
        close = close_matches(layer, names)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else f"; layers: {', '.join(names[:20])}"
        raise ValueError(f"unknown layer {layer!r}{hint}")
    return named[layer], layer


def default_layer(model: nn.Module, x: torch.Tensor) -> str:
    """The name of the layer whose 4-D output with a spatial size above 1 is finished last in a
    forward of ``x`` (the outermost one when a container's output is its last child's)."""
    x = _check_images(x)
    finished: list[str] = []
    handles = []

    def note(name: str):
        def hook(module, args, output):
            if isinstance(output, torch.Tensor) and output.dim() == 4 and output.shape[-1] * output.shape[-2] > 1:
                finished.append(name)

        return hook

    with preserved(model), torch.no_grad():
        model.eval()
        try:
            for name, module in model.named_modules():
                if name:
                    handles.append(module.register_forward_hook(note(name)))
            model(x)
        finally:
            for handle in handles:
                handle.remove()
    if not finished:
        raise ValueError(
            "no layer of the model gives a 4-D output (B, C, h, w) with h·w > 1; name the layer to explain with layer="
        )
    return finished[-1]


def _check_images(x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor of images (B, C, H, W), got {type(x).__name__}")
    if x.dim() != 4 or not x.is_floating_point():
        raise ValueError(f"x must be a float tensor of images (B, C, H, W), got {x.dtype} of shape {tuple(x.shape)}")
    return x


def _logits(output) -> torch.Tensor:
    if not isinstance(output, torch.Tensor) or output.dim() not in (1, 2):
        shape = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise ValueError(f"GradCAM needs a model that returns logits (B, K) or (B,); this one returns {shape}")
    return output if output.dim() == 2 else output.unsqueeze(1)


class OutputOutOfRange(ValueError):
    """A target index past the model's outputs; ``outputs``: how many it has, ``position``: which target."""

    def __init__(self, message: str, outputs: int):
        super().__init__(message)
        self.outputs, self.position = outputs, 0


def _scores(logits: torch.Tensor, target: Target, multilabel: bool) -> torch.Tensor:
    """The scalar differentiated for each image: ``(B,)``."""
    batch, outputs = logits.shape
    if isinstance(target, str):
        if target != "pred":
            raise ValueError(f"target must be an output index, 'pred' or a tensor of indices, got {target!r}")
        return logits.gather(1, logits.argmax(dim=1, keepdim=True)).squeeze(1)
    if isinstance(target, torch.Tensor) and target.dim() == 1:
        if target.numel() != batch or target.is_floating_point():
            raise ValueError(
                f"a tensor target holds one integer index per image ({batch}), "
                f"got {target.dtype} of shape {tuple(target.shape)}"
            )
        indices = target.to(logits.device, torch.long)
    else:
        if isinstance(target, bool) or not hasattr(target, "__index__"):
            raise ValueError(f"target must be an output index, 'pred' or a tensor of indices, got {target!r}")
        indices = torch.full((batch,), int(target), dtype=torch.long, device=logits.device)
    if ((indices < 0) | (indices >= outputs)).any():
        raise OutputOutOfRange(f"target index out of range: the model has {outputs} outputs (0 to {outputs - 1})", outputs)
    scores = logits.gather(1, indices.unsqueeze(1)).squeeze(1)
    return scores.abs() if multilabel else scores


def _cam(activation: torch.Tensor, grad: torch.Tensor, size) -> torch.Tensor:
    """ReLU(Σ_c α_c A_c), upsampled to ``size``, min-max scaled per image: ``(B, H, W)`` float32."""
    weights = grad.mean(dim=(2, 3), keepdim=True)
    cam = F.relu((weights * activation).sum(dim=1, keepdim=True))
    cam = F.interpolate(cam.float(), size=tuple(size), mode="bilinear", align_corners=False).squeeze(1)
    low = cam.amin(dim=(1, 2), keepdim=True)
    span = cam.amax(dim=(1, 2), keepdim=True) - low
    flat = span <= 0
    return torch.where(flat, torch.zeros_like(cam), (cam - low) / torch.where(flat, 1.0, span)).detach()
