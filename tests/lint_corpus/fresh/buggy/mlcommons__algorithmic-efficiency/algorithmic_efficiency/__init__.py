"""Algorithmic Efficiency."""

__version__ = '0.0.1'
