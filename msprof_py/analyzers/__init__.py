"""Analyzers: pure functions from a stored profile to DataFrames and findings (no torch here)."""
