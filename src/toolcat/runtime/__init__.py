"""Calling tools: lazy import, argument validation, policy, timeouts, results.

This is the only package that imports tool implementations.
"""
