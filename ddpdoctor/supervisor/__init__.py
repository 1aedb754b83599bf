"""The supervisor: watches every rank live, catches hangs and failures, writes the report."""
