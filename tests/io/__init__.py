"""Tests of xray_tb.io."""
