"""Where a non-finite value started when only the gradients show it: the forward run again.

A NaN in a batch (or an activation that overflows) makes every gradient non-finite. At a health step
the monitor's hooks saw that iteration's activation layers, and the origin is the first of them whose
output is non-finite. Between health steps nothing of the forward is kept, and the gradients
alone would name the last layer, where backward starts. So that the answer does not depend on the
pace, :class:`ForwardReplay` keeps, for each training forward since the last check, a reference to
its inputs (no copy) and the CPU random state at its start (dropout draws the same masks again).
When the sentinel finds only gradients non-finite, :meth:`ForwardReplay.run` runs those forwards
again, with every called layer's output tapped (the monitor's recorder) and the model left as it was
(:func:`xray_tb.trace.state.preserved`: buffers, random state, modes; no backward, so no ``.grad``),
and stops at the first that holds a non-finite output: the first layer in dataflow order whose output
is not finite is the origin (:func:`first_nonfinite_output`), at every pace and also where health's
own checks see no layer (an LSTM); between health steps that iteration's activations are measured
from it. The references are dropped at every check.

Fixed cost per forward (one pre-hook on the root module, about 6 µs on a 2-core VM), nothing per
layer. Only on a CPU, where the sentinel knows at once (on an accelerator the find is read later, when
the inputs are gone), and not where the forward runs collectives (FSDP's sharded weights,
``SyncBatchNorm``). Under DDP the gradients, and so the find, are the same on every rank: each rank
runs its own batch again, and the activations are combined as at a health step (one collective every
rank reaches, also a rank with nothing to run again). Not replayed: an input written in place since
its forward (its version changed), forwards beyond the last :data:`LIMIT` before a check, and forwards
an optimizer stepped after (a global step post-hook drops them: the weights moved; a model split over
optimizers is run again at the check before the first of them steps).

At a find the kept inputs also tell whether the batch itself held the NaN or Inf
(:meth:`ForwardReplay.inputs_nonfinite`): the ``nonfinite`` finding then says to check the data.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Optional

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from xray_tb.capture.hooks import Hook, TapRecorder, call_weakly
from xray_tb.capture.tap_value import version_of
from xray_tb.health.stats.outputs import nonfinite_flags
from xray_tb.health.training_forwards import TrainingThread
from xray_tb.module_hooks import ModuleHooks
from xray_tb.trace.graph import Graph, Tap
from xray_tb.trace.state import preserved

#: The most forwards kept between two checks (gradient accumulation over more micro-batches keeps the last ones).
LIMIT = 8


class _Forward:
    """One training forward: its inputs, their versions then, and the CPU random state at its start."""

    __slots__ = ("args", "kwargs", "versions", "rng")

    def __init__(self, args: tuple, kwargs: dict):
        self.args, self.kwargs = args, kwargs
        self.versions = [(t, version_of(t)) for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
        self.rng = torch.default_generator.get_state()

    def unchanged(self) -> bool:
        return all(version_of(tensor) == version for tensor, version in self.versions)


class ForwardReplay:
    """The training forwards since the last check, to run again (see the module's doc)."""

    def __init__(self, model: nn.Module):
        self._model = model
        self._kept: list[_Forward] = []
        self._thread = TrainingThread()  # the one that checks
        self._hooks = ModuleHooks()  # the one hook between health steps, on the root module
        self._hooks.pre((model,), Hook(self._before_forward), with_kwargs=True)
        this = weakref.ref(self)  # a global hook must not keep the replay alive
        self._step_handle = register_optimizer_step_post_hook(
            Hook(lambda optimizer, args, kwargs: call_weakly(this, "_weights_moved")))

    def _weights_moved(self) -> None:
        """An optimizer stepped: the kept forwards ran with weights that are no longer the model's."""
        self._kept.clear()

    def _before_forward(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if not self._thread.claims():
            return
        if len(self._kept) >= LIMIT:
            del self._kept[0]
        self._kept.append(_Forward(args, kwargs))

    def forget(self) -> None:
        """A check ran: drop the references (called on the training thread)."""
        self._thread.claim()
        self._kept.clear()

    def inputs_nonfinite(self) -> bool:
        """Whether a floating input of a kept forward holds a NaN or an infinity (the batch brought it)."""
        return any(values_nonfinite(t for t, _ in forward.versions) for forward in self._kept)

    def run(self, recorder: TapRecorder, nonfinite: Callable[[], bool], paused: tuple = ()) -> bool:
        """Run the kept forwards again, oldest first, with ``recorder`` armed (``paused``: hook sets to
        disarm meanwhile), until ``nonfinite()`` says what ``recorder`` kept holds a non-finite value;
        whether a forward ran (what ``recorder`` keeps is then the last one run)."""
        kept = [forward for forward in self._kept if forward.unchanged()]
        if not kept:
            return False
        was_armed = recorder.armed
        disarmed = [hooks for hooks in paused if hooks is not None and hooks.armed]
        for hooks in disarmed:
            hooks.disarm()
        recorder.arm()
        try:
            for forward in kept:
                with preserved(self._model), torch.enable_grad():  # as trained: its outputs are kept with grad on
                    torch.default_generator.set_state(forward.rng)
                    self._model(*forward.args, **forward.kwargs)
                if nonfinite():
                    break
        finally:
            if not was_armed:
                recorder.disarm()
            for hooks in disarmed:
                hooks.arm()
        return True

    def remove(self) -> None:
        """Remove the hooks and drop the references; idempotent."""
        self._hooks.remove()
        self._step_handle.remove()
        self._kept.clear()


def runs_collectives(modules) -> bool:
    """Whether a forward of these modules runs torch.distributed collectives (``SyncBatchNorm``): not replayed,
    a rank's replay would wait on the others'."""
    return any(isinstance(module, nn.SyncBatchNorm) for module in modules)


def is_replay_hook(hook: Any) -> bool:
    """Whether ``hook`` (from a module's ``_forward_pre_hooks``) is a :class:`ForwardReplay`'s."""
    return isinstance(hook, Hook) and isinstance(getattr(hook._function, "__self__", None), ForwardReplay)


def every_output(model: nn.Module, scope, graph: Graph) -> TapRecorder:
    """An unarmed recorder of every called layer's (first) output, and of the taps of ``scope``'s checks
    (an activation module called again, for one)."""
    taps = {Tap(name, node["call"]) for name, node in graph.layers.items()}
    taps |= set(scope.output_taps.values()) | {layer.source.tap for layer in scope.activations}
    return TapRecorder.for_graph(model, scope.modules, graph, taps)


def first_nonfinite_output(latest: dict, order: list[str]) -> Optional[str]:
    """The first layer in ``order`` whose kept output (``latest``: a recorder's, by tap) is not finite."""
    flagged = nonfinite_layers(latest)
    return next((name for name in order if name in flagged), None)


def nonfinite_layers(latest: dict) -> set[str]:
    """The layers whose kept output (``latest``: a recorder's, by tap) is not finite."""
    by_layer: dict[str, list] = {}
    for tap, value in latest.items():
        by_layer.setdefault(tap.module, []).extend(value.outputs.values())
    return {name for name, values in by_layer.items() if values_nonfinite(values)}


def values_nonfinite(values: Any) -> bool:
    """Whether any floating tensor among ``values`` holds a NaN or an infinity (the forward checks' test)."""
    return any(flag is not None and bool(flag) for flag in nonfinite_flags(list(values)))
