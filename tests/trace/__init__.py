"""Tests of xray_tb.trace."""
