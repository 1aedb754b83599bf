"""Robustness tests: faults, bad input, faithfulness, security."""
