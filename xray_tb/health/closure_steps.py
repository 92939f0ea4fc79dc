"""An optimizer step given a closure (``optimizer.step(closure)``: Lightning's automatic optimization,
LBFGS) runs its last backward inside the step, after the step's pre-hooks: a pre-hook that measured the
gradients then would see those of the micro-batches before it (with gradient accumulation), or none.
:func:`after_closure` has such a hook's work run once the closure first returns, still before the
weights move: on the gradients the step applies."""

from __future__ import annotations

from typing import Any, Callable, Optional


def after_closure(args: tuple, kwargs: dict, run: Callable[[], None]) -> Optional[tuple[tuple, dict[str, Any]]]:
    """For a step pre-hook: ``run()`` now when the step has no closure (None: its arguments unchanged);
    else the step's arguments with the closure wrapped to call ``run()`` once, after it first returns.
    ``args`` are those torch hands its step pre-hooks: the optimizer first, then ``step()``'s own."""
    closure = kwargs["closure"] if "closure" in kwargs else args[1] if len(args) > 1 else None
    if closure is None:
        run()
        return None
    ran = False

    def closure_then_run():
        nonlocal ran
        loss = closure()
        if not ran:  # LBFGS calls it again and again: the first evaluation is the step's
            ran = True
            run()
        return loss

    if "closure" in kwargs:
        return args, {**kwargs, "closure": closure_then_run}
    return (args[0], closure_then_run, *args[2:]), kwargs
