"""Static analysis of training scripts: collectives that only some ranks reach."""
