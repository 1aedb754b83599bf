"""Alignment: the ranks' calls matched by seq, where they went out of step, clocks, iterations and loader epochs."""
