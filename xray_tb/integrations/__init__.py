"""Xray callbacks for training frameworks: :mod:`xray_tb.integrations.lightning` and
:mod:`xray_tb.integrations.transformers` (each needs its extra; nothing here imports them)."""
