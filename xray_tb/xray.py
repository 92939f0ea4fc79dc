"""The Xray facade: attach to a model, record what the plan asks at chosen steps, close."""

from __future__ import annotations

import copy
import time
import uuid
import warnings
from typing import Any, Optional, Sequence

import torch
from torch import nn

from tb_plugin import metadata
from xray_tb import graph
from xray_tb import plan as plans
from xray_tb._module_trace import trace
from xray_tb.capture import make_frame, recompute_activation
from xray_tb.hooks import TapRecorder
from xray_tb.selectors import RandomFilters, SelectionInfo, Selector
from xray_tb.writer import EventSink


class Xray:
    """Records weights, outputs, activations and gradients of a model's layers for TensorBoard.

    Args:
        model: the ``nn.Module`` to look into. Xray never changes it.
        example_input: a tensor, a tuple of positional inputs, or a dict of keyword inputs, used
            once to trace the architecture.
        input_size: instead of ``example_input``, the shape of one sample without the batch
            dimension; a random batch of 2 is made.
        plan: what to record, ``{layer: {kind: bool}}`` or a list of layer names; defaults to
            :meth:`draft_plan`.
        logdir: the run directory to write to (Xray opens its own event file there).
        writer: instead of ``logdir``, a ``torch.utils.tensorboard.SummaryWriter`` whose run
            receives Xray's data, next to the user's scalars.
        selector: how filters or rows are chosen from big tensors (default :class:`RandomFilters`).
    """

    def __init__(
        self,
        model: nn.Module,
        example_input: Any = None,
        *,
        input_size: Optional[Sequence[int]] = None,
        plan: Optional[plans.PlanLike] = None,
        logdir: Optional[str] = None,
        writer=None,
        selector: Optional[Selector] = None,
    ):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if logdir is not None and writer is not None:
            raise ValueError("give either logdir= or writer=, not both")
        if logdir is None and writer is None:
            raise ValueError("give logdir='runs/<name>' or writer=SummaryWriter(...) so Xray knows where to write")
        args, kwargs = _example_inputs(model, example_input, input_size)
        self._model = model
        self.architecture: dict = trace(model, args, kwargs)
        self.run_id = uuid.uuid4().hex
        self._selector = selector if selector is not None else RandomFilters()
        self._sink = EventSink(logdir=logdir, writer=writer)
        self._recorder: Optional[TapRecorder] = None
        self._plan: dict[str, dict[str, bool]] = {}
        self._activations: dict[str, graph.ActivationSource] = {}
        self._plan_version = 0
        self._captures = 0
        self._last_step: Optional[int] = None
        self._warned: set[str] = set()
        self._sink.add(metadata.json_summary(metadata.ARCHITECTURE_TAG, self.architecture), step=0)
        self.set_plan(self.draft_plan() if plan is None else plan)

    # The plan -------------------------------------------------------------------------------------

    def draft_plan(self) -> dict[str, dict[str, bool]]:
        """A plan drafted from the layer types: conv output + activation, linear activation."""
        return plans.draft_plan(self.architecture)

    @property
    def plan(self) -> dict[str, dict[str, bool]]:
        """A copy of the plan in force."""
        return copy.deepcopy(self._plan)

    def set_plan(self, plan: plans.PlanLike) -> None:
        """Validate ``plan`` and record by it from now on (see :mod:`xray_tb.plan`)."""
        self._check_open()
        normalized = plans.normalize_plan(plan, self.architecture, self._model)
        activations = {
            layer: graph.activation_source(self.architecture, layer) for layer, kinds in normalized.items() if kinds["activation"]
        }
        output_taps = {graph.Tap(layer) for layer, kinds in normalized.items() if kinds["output"] or kinds["grad"]}
        taps = output_taps | {source.tap for source in activations.values()}
        recorder = TapRecorder(
            self._model,
            taps,
            copy={tap for tap in taps if graph.overwritten_in_place(self.architecture, tap)},
            grads={graph.Tap(layer) for layer, kinds in normalized.items() if kinds["grad"]},
        )
        if self._recorder is not None:
            self._recorder.remove()
        self._recorder, self._plan, self._activations = recorder, normalized, activations
        self._sink.add(metadata.json_summary(metadata.PLAN_TAG, self._plan), step=self._plan_version)
        self._plan_version += 1
        self._sink.flush()

    # Recording ------------------------------------------------------------------------------------

    def take_graphs(self, step: Optional[int] = None) -> int:
        """Record what the plan asks from the latest training step; call it after ``loss.backward()``.

        Args:
            step: the training step to file the frames under; by default the number of earlier
                captures.

        Returns:
            The step recorded.
        """
        self._check_open()
        step = self._captures if step is None else int(step)
        if self._last_step is not None and step <= self._last_step:
            self._warn_once("step", f"take_graphs(step={step}) after step {self._last_step}: TensorBoard keeps one frame per step, steps should increase")
        wall_time = time.time()
        modules = dict(self._model.named_modules())
        for layer, kinds in self._plan.items():
            for kind in metadata.KINDS:
                if not kinds[kind]:
                    continue
                tensor = self._tensor(layer, kind, modules[layer])
                if tensor is None:
                    continue
                info = SelectionInfo(layer=layer, kind=kind, layer_type=type(modules[layer]).__name__)
                header, values = make_frame(tensor, info=info, selector=self._selector, step=step, run_id=self.run_id, wall_time=wall_time)
                self._sink.add(metadata.frame_summary(header, values), step=step, wall_time=wall_time)
        self._sink.flush()
        self._captures += 1
        self._last_step = step
        return step

    def _tensor(self, layer: str, kind: str, module: nn.Module) -> Optional[torch.Tensor]:
        if kind in ("weight", "weight_grad"):
            tensor = module.weight if kind == "weight" else module.weight.grad
            if tensor is None:
                self._warn_once("weight_grad", "take_graphs() found no .grad on the weights (call it after loss.backward()); weight_grad was not recorded")
            return tensor
        source_tap = self._activations[layer].tap if kind == "activation" else graph.Tap(layer)
        kept = self._recorder.latest.get(source_tap)
        if kept is None:
            self._warn_once("forward", "take_graphs() found no forward pass run with grad enabled since the plan was set; outputs were not recorded")
            return None
        if kind == "grad":
            if kept.grad is None:
                self._warn_once("grad", "take_graphs() found no output gradients (call it after loss.backward()); grad was not recorded")
            return kept.grad
        source = self._activations.get(layer) if kind == "activation" else None
        if source is not None and source.op is not None:
            return recompute_activation(source.op, dict(source.kwargs), kept.output)
        return kept.output

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, stacklevel=3)

    # Life cycle -----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._sink is None:
            raise RuntimeError("this Xray is closed; create a new one to record again")

    def close(self) -> None:
        """Remove every hook and flush and close the event file. Idempotent."""
        if self._recorder is not None:
            self._recorder.remove()
            self._recorder = None
        if self._sink is not None:
            self._sink.close()
            self._sink = None

    def __enter__(self) -> "Xray":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _example_inputs(model: nn.Module, example_input: Any, input_size: Optional[Sequence[int]]) -> tuple[tuple, dict]:
    """Positional and keyword inputs for tracing."""
    if (example_input is None) == (input_size is None):
        raise ValueError("give exactly one of example_input= (a batch the model accepts) or input_size= (one sample's shape)")
    if input_size is not None:
        try:
            shape = tuple(int(d) for d in input_size)
        except (TypeError, ValueError):
            raise ValueError(f"input_size is one sample's shape without the batch, e.g. (1, 28, 28); got {input_size!r}") from None
        reference = next(model.parameters(), None)
        batch = torch.randn(2, *shape, generator=torch.Generator().manual_seed(0))  # leaves the global RNG alone
        return (batch.to(reference.device) if reference is not None else batch,), {}
    if isinstance(example_input, dict):
        return (), dict(example_input)
    if isinstance(example_input, tuple):
        return example_input, {}
    return (example_input,), {}
