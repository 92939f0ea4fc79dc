"""Forward hooks that keep the outputs (and output gradients) of chosen module calls."""

from __future__ import annotations

import sys
import threading
import weakref
from typing import Any, Callable, Optional

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from xray_tb.capture.tap_value import TapValue, tensors_with_paths, version_of
from xray_tb.module_hooks import ModuleHooks
from xray_tb.trace.graph import Graph, Tap


class _InertHook:
    """What an Xray hook becomes when the model is pickled, deep-copied or ``torch.save``d: nothing."""

    def __call__(self, *args) -> None:
        return None


class Hook:
    """A hook function that pickles and copies as :class:`_InertHook`, so the model stays saveable; every
    hook Xray registers (capture, training health, the optimizer step counter) is one."""

    def __init__(self, function: Callable):
        self._function = function
        run_eagerly_under_compile()

    def __call__(self, *args):
        return self._function(*args)

    def __reduce__(self):
        return (_InertHook, ())


def run_eagerly_under_compile() -> None:
    """Once ``torch.compile`` is in use (``torch._dynamo`` imported), have it run every :class:`Hook` as
    plain Python, a graph break, instead of tracing into it: the hooks keep the eager tensors they see
    and read the thread they run on. Cheap to call again (one lookup); never imports ``torch._dynamo``."""
    if Hook.__call__ is _EAGER_CALL and "torch._dynamo" in sys.modules:
        import torch._dynamo

        Hook.__call__ = torch._dynamo.disable(_EAGER_CALL)


_EAGER_CALL = Hook.__call__


def recompile_with_hooks(model: nn.Module) -> None:
    """``torch.compile`` does not guard its code on module hooks (torch's
    ``torch._dynamo.config.skip_nnmodule_hook_guards``): code it compiled for ``model``'s class before
    Xray's hooks were there (a warm-up step, another instance of the class) would go on running without
    them, and nothing would be recorded. Drop that code, so the next compiled call compiles again with the
    hooks. Nothing happens where ``torch._dynamo`` is not imported (no model was compiled)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    code = getattr(type(model).forward, "__code__", None)
    if eval_frame is not None and code is not None and hasattr(eval_frame, "reset_code"):
        eval_frame.reset_code(code)


def call_weakly(owner: "weakref.ref", method: str, *args) -> None:
    """Call ``method`` of the object ``owner`` refers to, if it still lives: what a hook registered
    globally (an optimizer step hook) calls, so that it does not keep its owner alive."""
    target = owner()
    if target is not None:
        getattr(target, method)(*args)


def _grad_keeper(grads: dict[str, torch.Tensor], path: str) -> Callable:
    def keep(grad: Optional[torch.Tensor]) -> None:
        # Autograd hands None for an output of a multi-output node that the loss does not use
        # (an LSTM's ``out`` when only ``h`` feeds the loss): nothing arrived, nothing is kept.
        if grad is not None:
            grads[path] = grad.detach()

    return keep


class TapRecorder:
    """Keeps references to the outputs of ``taps`` from the latest forward run with grad enabled.

    Hooks exist only while armed (:meth:`arm`, :meth:`disarm`). Only forwards on the training
    thread (:attr:`owner`: the thread that last called :meth:`claim`, at first the thread of the
    first forward with grad enabled) count: forwards under
    ``torch.no_grad()`` (validation) and forwards on other threads (an eval or serving thread) neither
    replace what was kept nor disturb the count of module calls. Calls are counted from the root
    module's forward; where the root never runs (a wrapper's ``training_step`` calling ``self.net(x)``),
    from each step's start, modulo ``calls_per_forward`` (how many times the traced forward called
    each module), so every such forward keeps its own outputs. Outputs in ``copy`` are copied,
    because a later op overwrites them in place; gradients of outputs in ``grads`` are caught with a
    tensor hook, which sees the gradient of the output as it was before any in-place op.

    Under reentrant activation checkpointing (``torch.utils.checkpoint(..., use_reentrant=True)``,
    torch's default when ``use_reentrant`` is not given) a checkpointed segment runs without grad in
    the forward and again, with grad, in backward. A tapped call that ran without grad keeps the output
    of that recomputation (the same values; its gradient arrives there). A forward inside a backward
    (also the whole model's) counts no call and replaces nothing a forward kept. A module that ran
    more than once without grad cannot be matched to its recomputations (segments recompute in
    reverse order): nothing is kept for it, and :attr:`errors` says why.
    """

    def __init__(
        self,
        model: nn.Module,
        modules: dict[str, nn.Module],
        taps: set[Tap],
        copy: set[Tap],
        grads: set[Tap],
        calls_per_forward: Optional[dict[str, int]] = None,
    ):
        self.latest: dict[Tap, TapValue] = {}
        self._model = model
        wanted: dict[str, dict[int, Tap]] = {}
        for tap in taps:  # one pass over the taps (a scan of them per module was quadratic)
            wanted.setdefault(tap.module, {})[tap.call] = tap
        # Built once, small (one hook object for all modules: thousands of closures added up to a
        # good share of what Xray holds between captures); arming for a due step only registers it.
        per_forward = calls_per_forward or {}
        # per module: its name, its taps by call (a tuple: None for a call not tapped) and its calls per forward
        self._targets: dict[int, tuple[str, tuple[Optional[Tap], ...], int]] = {
            id(modules[name]): (name, tuple(map(calls.get, range(max(calls) + 1))), max(per_forward.get(name, 0), max(calls) + 1))
            for name, calls in sorted(wanted.items())
        }
        self._modules = [modules[name] for name in sorted(wanted)]
        self._hook = Hook(self._on_output)
        self._start_hook = Hook(self._start_forward)
        self._copy, self._grads = copy, grads
        self._calls: dict[str, int] = {}
        self._rooted = False  # the root module's forward ran since the step began: calls counted from it
        # per module: the taps (None: untapped) of its calls without grad in this forward, for a recomputation
        self._without_grad: dict[str, list[Optional[Tap]]] = {}
        #: Why a tap's output could not be kept in the latest forward, by tap.
        self.errors: dict[Tap, str] = {}
        self.owner: Optional[int] = None
        self._hooks = ModuleHooks()  # armed: the start hook on the model, the output hook on each module
        self._tensor_handles: dict[Tap, list[RemovableHandle]] = {}

    @classmethod
    def for_graph(cls, model: nn.Module, modules: dict[str, nn.Module], graph: Graph, taps: set[Tap], grads: set[Tap] = frozenset()) -> TapRecorder:
        """A recorder of ``taps`` in a traced model: outputs the trace saw written in place are copied,
        and calls are counted per forward as the trace saw them."""
        copy = {tap for tap in taps if graph.overwritten_in_place(tap)}
        return cls(model, modules, taps, copy, set(grads), graph.calls_per_forward())

    def claim(self) -> None:
        """Make the calling thread the training thread, whose forwards are recorded; called once a step,
        which also restarts the count of module calls (for a forward that never runs the root module)."""
        self.owner = threading.get_ident()
        self._calls.clear()
        self._without_grad.clear()
        self._rooted = False

    def copy_from_now_on(self, tap: Tap) -> None:
        """Copy ``tap``'s output when it is kept: something writes into it after the layer returns."""
        self._copy = self._copy | {tap}

    @property
    def armed(self) -> bool:
        return bool(self._hooks)

    def arm(self) -> None:
        """Register the hooks (no-op when armed or when there is nothing to tap)."""
        if self.armed or not self._modules:
            return
        run_eagerly_under_compile()  # the model may have been compiled after Xray was made
        self._hooks.pre((self._model,), self._start_hook)
        self._hooks.post(self._modules, self._hook)

    def disarm(self) -> None:
        """Remove the module hooks; what was kept stays until :meth:`clear`."""
        if not self._hooks:
            return
        self._hooks.remove()  # the hook tables the entries grew are given back too

    def _start_forward(self, module, args) -> None:
        thread = threading.get_ident()
        if self.owner is None and torch.is_grad_enabled():
            self.owner = thread
        if thread != self.owner or torch._C._current_autograd_node() is not None:  # not a recomputation in backward
            return
        self._calls.clear()
        self._without_grad.clear()
        self._rooted = True
        if torch.is_grad_enabled():  # a training forward: what an earlier one kept is not this one's
            self.latest.clear()  # (a layer this forward skips is missing, not its last output again)
            self.errors.clear()
            self._drop_tensor_hooks()

    def _drop_tensor_hooks(self) -> None:
        for handles in self._tensor_handles.values():
            for handle in handles:
                handle.remove()
        self._tensor_handles.clear()

    def _on_output(self, module, args, output) -> None:
        if torch._C._current_autograd_node() is not None:  # a forward inside a backward: a checkpoint's recomputation
            self._on_recomputed(module, output)
            return
        thread = threading.get_ident()
        if self.owner is None and torch.is_grad_enabled():
            self.owner = thread  # the first training forward, also one that never runs the root module
        if thread != self.owner:
            return
        name, taps, per_forward = self._targets[id(module)]
        count = self._calls.get(name, 0)
        self._calls[name] = count + 1
        call = count if self._rooted else count % per_forward  # a dynamic forward may call it more often than the trace
        tap = taps[call] if call < len(taps) else None
        if not torch.is_grad_enabled():
            without_grad = self._without_grad.setdefault(name, [])
            if len(without_grad) <= per_forward:  # bounded: more than one is too many anyway
                without_grad.append(tap)
        elif tap is not None:
            self._keep_safely(tap, output)

    def _on_recomputed(self, module, output) -> None:
        """A module run again in backward (reentrant checkpointing): keep its output for the tapped call
        that ran without grad in the forward, when that call is the module's only one without grad."""
        calls = self._without_grad.get(self._targets[id(module)][0])
        if not calls or not torch.is_grad_enabled():
            return
        if len(calls) > 1:
            for tap in filter(None, calls):
                self._drop(tap, "recomputed")
            calls.clear()
            return
        tap = calls.pop()
        if tap is not None:
            self._keep_safely(tap, output)

    def _keep_safely(self, tap: Tap, output: Any) -> None:
        try:
            self._keep(tap, tensors_with_paths(output))
        except Exception as error:  # noqa: BLE001 - Xray must never break the user's forward
            self._drop(tap, f"failed: keeping the output raised {type(error).__name__}: {error}")

    def _drop(self, tap: Tap, reason: str) -> None:
        """Forget what ``tap`` kept (an earlier forward's), and say why nothing is."""
        self.latest.pop(tap, None)
        self._drop_grad_hooks(tap)
        self.errors[tap] = reason

    def _drop_grad_hooks(self, tap: Tap) -> None:
        for handle in self._tensor_handles.pop(tap, ()):
            handle.remove()

    def _keep(self, tap: Tap, outputs: list[tuple[str, torch.Tensor]]) -> None:
        if not outputs:
            return
        self._drop_grad_hooks(tap)  # a previous forward's, when the root never ran
        copy = tap in self._copy
        value = TapValue({path: tensor.detach().clone() if copy else tensor.detach() for path, tensor in outputs})
        if not copy:
            value.versions = {path: version for path, tensor in outputs if (version := version_of(tensor)) is not None}
        self.latest[tap] = value
        if tap in self._grads:
            wanted = [(path, tensor) for path, tensor in outputs if tensor.requires_grad]
            value.expected_grads = tuple(path for path, _ in wanted)
            self._tensor_handles[tap] = [tensor.register_hook(_grad_keeper(value.grads, path)) for path, tensor in wanted]

    def clear(self) -> None:
        """Forget the kept tensors (and their pending gradient hooks)."""
        self._drop_tensor_hooks()
        self.latest.clear()
        self.errors.clear()
        self._calls.clear()
        self._without_grad.clear()

    def remove(self) -> None:
        """Remove every hook and forget everything; idempotent."""
        self.disarm()
        self.clear()
