"""Helpers shared by test files (a test file never imports another test file)."""
