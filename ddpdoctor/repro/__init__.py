"""Standalone replay scripts of a run's recorded collectives."""
