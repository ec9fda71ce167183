"""Shared substrate written once and reused by every method and claim check."""
