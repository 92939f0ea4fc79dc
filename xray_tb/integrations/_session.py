"""What the framework callbacks share: an :class:`~xray_tb.Xray` made when training starts, one
``take_graphs`` per optimizer step, closed at the end.

The model is traced with an example input: the one given to the callback (``example_input=`` or
``input_size=``), else the framework's own (Lightning's ``example_input_array``), else the inputs of
the first training forward. In that last case Xray is made inside that forward's pre-hook, and its
hooks take part in that forward already, so step 0 is recorded whole.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

import torch
from torch import nn

from xray_tb.capture.schedules import ScheduleLike, as_schedule
from xray_tb.trace import arguments
from xray_tb.xray import Xray

#: Set by the callback from the framework's optimizer steps, never by the user.
_RESERVED = {
    "model": "the callback attaches to the framework's model",
    "optimizer": "the callback counts the framework's optimizer steps",
}


class XraySession:
    """One Xray over one training run of a framework.

    Args:
        every: the schedule, in optimizer steps (``None``: every step).
        plan: what to record (default: :meth:`Xray.draft_plan`).
        options: the other :class:`~xray_tb.Xray` keyword arguments.
        owner: the callback's name, for messages.
    """

    def __init__(self, every: ScheduleLike, plan: Any, options: dict, owner: str):
        as_schedule(every)  # a bad schedule is refused when the callback is made
        parameters = inspect.signature(Xray).parameters
        for name in options:
            if name in _RESERVED:
                raise TypeError(f"{owner} does not take {name}=: {_RESERVED[name]}")
            if name not in parameters or name in ("every", "plan"):
                valid = ", ".join(p for p in parameters if p not in (*_RESERVED, "every", "plan"))
                raise TypeError(
                    f"{owner} got an unexpected option {name}=; it takes every=, plan= and Xray's options: {valid}"
                )
        if "logdir" in options and "writer" in options:
            raise ValueError(f"{owner}: give either logdir= or writer=, not both")
        arguments.model_free(options)  # a bad option is refused here, not once the trainer has started
        self._owner = owner
        self._options = {"every": every, "plan": plan, **options}
        self._pending_hook = None
        self._next_step: Optional[int] = None
        self.xray: Optional[Xray] = None

    @property
    def has_example(self) -> bool:
        """Whether the callback was given an example input (``example_input=`` or ``input_size=``)."""
        return self._options.get("example_input") is not None or self._options.get("input_size") is not None

    def start(self, model: nn.Module, logdir: Callable[[], str], example: Any = None,
              training: Callable[[nn.Module], bool] = lambda model: model.training) -> None:
        """Attach to ``model`` now when an example input is known, else at its first training forward.

        Args:
            model: the model to record.
            logdir: the run folder to write to unless the callback was given ``logdir=`` or ``writer=``;
                called when Xray is made.
            example: the framework's example input (used when the callback was given none).
            training: whether a forward of ``model`` is a training forward.
        """
        self.close()
        self.xray, self._next_step = None, None
        if self.has_example or example is not None:
            self._make(model, logdir, {} if self.has_example else {"example_input": example})
            return

        def first_forward(module: nn.Module, args: tuple, kwargs: dict) -> None:
            if not torch.is_grad_enabled() or not training(module):
                return  # a validation forward: wait for training
            self._remove_pending_hook()
            before = set(module._forward_pre_hooks)
            self._make(module, logdir, {"example_input": _example(module, args, kwargs, self._owner)})
            # torch runs the pre-hooks of this call from a snapshot taken before ours ran, so the ones
            # Xray just added (each marks the start of a forward) are run here, for this forward.
            for key, hook in list(module._forward_pre_hooks.items()):
                if key not in before:
                    hook(module, args, kwargs) if key in module._forward_pre_hooks_with_kwargs else hook(module, args)

        self._pending_hook = model.register_forward_pre_hook(first_forward, with_kwargs=True)

    def step(self, framework_step: int) -> Optional[int]:
        """Capture if the optimizer step about to run is due; call it after backward, before the step.

        Steps count optimizer steps from ``framework_step`` at the first call (the framework's global
        step: 0, or where a resumed training goes on). Returns the step recorded, or None.
        """
        if self._next_step is None:
            self._next_step = int(framework_step)
        step, self._next_step = self._next_step, self._next_step + 1
        if self.xray is None:
            if self._pending_hook is None:
                return None  # not started here: another rank, or closed
            raise RuntimeError(
                f"{self._owner}: the model's forward did not run in this training step, so Xray has no input to trace "
                "(a training step that calls submodules directly). Give the callback example_input= (a batch the model "
                "accepts) or input_size= (one sample's shape)"
            )
        return self.xray.take_graphs(step)

    def close(self) -> None:
        """Close the Xray (flush and close its event file, remove every hook); idempotent."""
        self._remove_pending_hook()
        if self.xray is not None:
            self.xray.close()

    def _make(self, model: nn.Module, logdir: Callable[[], str], extra: dict) -> None:
        options = {**self._options, **extra}
        if options.get("logdir") is None and options.get("writer") is None:
            options["logdir"] = logdir()
        self.xray = Xray(model, **options)

    def _remove_pending_hook(self) -> None:
        if self._pending_hook is not None:
            self._pending_hook.remove()
            self._pending_hook = None


def _example(module: nn.Module, args: tuple, kwargs: dict, owner: str) -> Any:
    """A forward's inputs as Xray's ``example_input``: the positional inputs as a tuple, or the
    keyword inputs as a dict (positional ones bound to their parameter names when both are used)."""
    if not kwargs:
        return tuple(args)
    if not args:
        return dict(kwargs)
    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except TypeError as error:
        raise ValueError(
            f"{owner}: cannot replay the first training forward's inputs ({error}); give example_input="
        ) from None
    keywords = {}
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            raise ValueError(
                f"{owner}: the model's forward takes *{name} and keywords; give the callback example_input="
            )
        keywords.update(value if kind is inspect.Parameter.VAR_KEYWORD else {name: value})
    return keywords
