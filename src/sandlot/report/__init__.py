"""Summaries and reports computed from result files."""
