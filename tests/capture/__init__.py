"""Tests of xray_tb.capture."""
