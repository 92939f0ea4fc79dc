"""Tests of xray_tb.notebook."""
