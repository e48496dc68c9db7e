"""Exact-match scoring per the evaluation-design pack's method."""
