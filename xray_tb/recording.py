"""One recording's shared state, handed explicitly to every part of an :class:`~xray_tb.Xray`.

A :class:`Recording` holds what the parts share: the model and its traced graph, the event sink, the
tap recorder of the plan in force, the step counter, and :meth:`Recording.paused` to let a forward pass
through without Xray's hooks. The capture (:mod:`xray_tb.capture.capturer`), training health
(:mod:`xray_tb.health.training`), Attention-IoU (:mod:`xray_tb.bias.recording`) and the read-back
(:mod:`xray_tb.notebook.readback`) receive it; none reads the facade's fields.
"""

from __future__ import annotations

import contextlib
import json
import warnings
import weakref
import zlib
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from xray_tb.capture.shared_reductions import SharedReductions
from xray_tb import distributed
from xray_tb.capture.hooks import Hook, TapRecorder
from xray_tb.io.reader import earlier_run
from xray_tb.io import remote_event_file
from xray_tb.io.remote_event_file import CLOSE_TIMEOUT, UploadIncompleteError, UploadWarning
from xray_tb.io.sink import EventSink
from xray_tb.trace.graph import Graph
from xray_tb.user_frame import user_stacklevel


class Recording:
    """The model, graph, sink, tap recorder and step counter of one recording; released once, by
    :meth:`release` (``Xray.close()`` or garbage collection)."""

    def __init__(self, model: nn.Module, architecture: dict, sink: Optional[EventSink], run_id: str):
        self.model = model
        # Kept as compressed JSON (7 KB for a ResNet-50, against 300 KB of Python objects).
        encoded = json.dumps(architecture, separators=(",", ":"), check_circular=False).encode("utf-8")
        self._architecture = zlib.compress(encoded, 1)
        self._encoded: Optional[bytes] = encoded  # for the run's first write, then dropped (built())
        # The index over it is held while Xray is built (:meth:`built` lets go of it): afterwards only a plan
        # change asks for it, and it is built again from the compact copy (400 KB on 1,000 small layers).
        self._graph: Optional[Graph] = Graph(architecture)
        self._graph_ref = weakref.ref(self._graph)
        self.run_id = run_id
        self.logdir: Optional[str] = None if sink is None else sink.logdir
        #: The step the next training step is filed under (optimizer steps, or take_graphs() calls).
        self.next_step = 0
        #: The findings an earlier process wrote in this run directory (a resumed run), or None.
        self.earlier_findings: Optional[list[dict]] = None
        #: The tap recorder of the plan in force (set by the capture when it installs a plan).
        self.recorder: Optional[TapRecorder] = None
        #: Reductions of the step's tensors, shared by the frames' statistics and training health.
        self.reductions = SharedReductions()
        self._sink: Optional[EventSink] = sink
        self._released: Optional[EventSink] = None  # the sink once released: a remote one may still be uploading
        self._step_hook = None
        self._arm_for: Optional[Callable[[], Optional[Callable[[int], None]]]] = None
        self._pausable: list = []  # other hook sets to pause with the recorder (training health's)
        self._on_release: list[Callable[[], None]] = []  # run first at release (they write their last events)

    @property
    def graph(self) -> Graph:
        """The index over the traced architecture: layers, successors, activations. Not held between
        captures: after construction it is built again, from the compact copy, when something asks."""
        graph = self._graph or self._graph_ref()
        if graph is None:
            graph = Graph(self.architecture)
            self._graph_ref = weakref.ref(graph)
        return graph

    def built(self) -> None:
        """Construction is over: the graph index and the architecture's JSON are no longer held."""
        self._graph = self._encoded = None

    @property
    def architecture(self) -> dict:
        """The traced architecture, decoded afresh on each access from the compact copy kept."""
        return json.loads(self.architecture_json())

    def architecture_json(self) -> bytes:
        """The architecture document as compact JSON, as written to the run."""
        return self._encoded if self._encoded is not None else zlib.decompress(self._architecture)

    def open(self, sink: EventSink) -> None:
        """Write through ``sink`` from now on (a recording made before its run is opened)."""
        self._sink, self.logdir = sink, sink.logdir

    @property
    def sink(self) -> EventSink:
        """The event sink; raises once the recording is released."""
        if self._sink is None:
            raise RuntimeError("this Xray is closed; create a new one to record again")
        return self._sink

    @property
    def closed(self) -> bool:
        return self._sink is None

    @property
    def counts_optimizer_steps(self) -> bool:
        return self._step_hook is not None

    @property
    def current_step(self) -> int:
        """The last step counted: that of the latest training step, or 0 before any."""
        return max(self.next_step - 1, 0)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Write what is buffered; with ``timeout``, wait up to that many seconds for a remote run's
        uploads (those left by a release too), raising
        :class:`~xray_tb.io.remote_event_file.UploadIncompleteError` if some remain."""
        if self._sink is not None:
            self._sink.flush(timeout)
        elif timeout is not None and self._released is not None:
            self._released.close(timeout)

    def arm_with(self, arm_for: Callable[[int], None]) -> None:
        """How every hook is armed for a step (Xray's schedule): after each counted optimizer step and
        after :meth:`paused`. A bound method is held weakly (a forgotten Xray can still be collected)."""
        self._arm_for = weakref.WeakMethod(arm_for) if hasattr(arm_for, "__self__") else (lambda: arm_for)

    def arm_for_next_step(self) -> None:
        arm_for = self._arm_for() if self._arm_for is not None and not self.closed else None
        if arm_for is not None:
            arm_for(self.next_step)

    def count_optimizer_steps(self, optimizer: torch.optim.Optimizer) -> None:
        """Count ``optimizer``'s steps as the steps, arming the hooks for each next one."""

        def count(optimizer, args, kwargs) -> None:
            if self._arm_for is not None and self._arm_for() is not None and not self.closed:
                self.next_step += 1
                self.arm_for_next_step()

        self._step_hook = optimizer.register_step_post_hook(Hook(count))

    def pause_with_recorder(self, hooks) -> None:
        """Pause ``hooks`` (anything with ``armed``, ``arm()`` and ``disarm()``) in :meth:`paused` too."""
        self._pausable.append(hooks)

    def on_release(self, close: Callable[[], None]) -> None:
        """Call ``close`` at release, before the hooks are removed and the sink closes."""
        self._on_release.append(close)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Let forward passes run without Xray's hooks (an evaluation between training steps); after,
        the hooks are armed for the next step as :meth:`arm_with` says (else as they were)."""
        armed = [hooks for hooks in (self.recorder, *self._pausable) if hooks is not None and hooks.armed]
        for hooks in armed:
            hooks.disarm()
        try:
            yield
        finally:
            if self._arm_for is not None and self._arm_for() is not None:
                self.arm_for_next_step()
            else:
                for hooks in armed:
                    hooks.arm()

    def release(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Close what was registered with :meth:`on_release`, remove the hooks, close the sink (a remote
        one waits up to ``timeout`` seconds for its uploads, see :meth:`EventSink.close`). Idempotent."""
        closers, self._on_release = self._on_release, []
        failure: Optional[BaseException] = None
        for close in closers:  # each runs whatever the others did: every hook goes, the sink is closed
            try:
                close()
            except BaseException as error:  # noqa: BLE001 - raised below, once everything is released
                failure = failure or error
        for removable in (self.recorder, self._step_hook):
            if removable is not None:
                removable.remove()
        self.recorder = self._step_hook = None
        if self._sink is not None:
            self._released, self._sink = self._sink, None
            self._released.close(timeout)
        if failure is not None:
            raise failure


def release_on_collection(recording: Recording) -> None:
    """Release ``recording`` for an Xray collected (or left open at exit) without ``close()``: uploads
    still waiting when the wait runs out stay spooled on local disk, with a warning saying where."""
    try:
        recording.release(remote_event_file.CLOSE_TIMEOUT)
    except UploadIncompleteError as error:
        warnings.warn(str(error), UploadWarning, stacklevel=2)


def open_sink(recording: Recording, writes: bool, logdir: Optional[str], writer) -> None:
    """Open ``recording``'s run: an event file in ``logdir`` (or through the user's ``writer``) when this
    process ``writes``; else (another rank writes) a sink that drops every write."""
    where = logdir if writer is None else writer.log_dir
    if writes:
        recording.earlier_findings = warn_about_earlier_captures(where)
        recording.open(EventSink(logdir=logdir, writer=writer))
    else:  # this rank only takes part in training health
        recording.open(distributed.NullSink(where))


def warn_about_earlier_captures(logdir: str) -> Optional[list[dict]]:
    """Warn once when the run directory already holds Xray captures (a resumed or repeated run); the
    findings the earlier process wrote last, if any (training health carries over those from before
    the steps it records again)."""
    previous, findings = earlier_run(logdir)
    if previous is not None:
        warnings.warn(
            f"{logdir!r} already holds Xray captures up to step {previous}: steps after it continue that run, and a step "
            "at or before it is recorded again, replacing the earlier one (the last write wins; TensorBoard's default "
            "loader then also hides the earlier attempt's steps after it). Give each run its own logdir to keep both",
            stacklevel=user_stacklevel(),
        )
    return findings
