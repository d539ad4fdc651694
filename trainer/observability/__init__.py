"""Metrics and structured logging."""
