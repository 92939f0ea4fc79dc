"""Tracing: what the model is, before anything is recorded.

:mod:`~xray_tb.trace.tracer` runs the model once and writes the architecture document,
:mod:`~xray_tb.trace.op_names` names the functional ops it sees, :mod:`~xray_tb.trace.graph` reads
that document (taps, activation sources, in-place ops) and :mod:`~xray_tb.trace.activations` says
which ops are activations. :mod:`~xray_tb.trace.state` leaves the model exactly as it was after
Xray's own forward passes (the trace here, the probe in :mod:`xray_tb.capture`).
:mod:`~xray_tb.trace.arguments` checks what ``Xray(...)`` is given (the example input is traced) and
:mod:`~xray_tb.trace.summary_table` prints the traced graph as text.

Nothing here writes to a run: the trace is the input of :mod:`xray_tb.capture`.
"""
