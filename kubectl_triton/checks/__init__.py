"""Checks: pure functions from parsed objects to Finding lists."""
