"""Capture: taking frames from a traced model at the steps a schedule picks.

:mod:`~xray_tb.capture.plan` says what to record per layer, :mod:`~xray_tb.capture.schedules` when,
:mod:`~xray_tb.capture.selectors` which filters or rows of a big tensor. :mod:`~xray_tb.capture.hooks`
keeps the tapped tensors of the training forward and backward (:mod:`~xray_tb.capture.probe` runs a
fixed batch instead), and :mod:`~xray_tb.capture.capture` turns what was kept into one event of
frames, each with its :mod:`~xray_tb.capture.frame_statistics` (min, max, mean, ... of one frame;
training health's statistics live in :mod:`xray_tb.health`).

The stable public paths for users are :mod:`xray_tb.schedules` and :mod:`xray_tb.selectors`
(aliases of the modules here) and the names exported by :mod:`xray_tb`.
"""
