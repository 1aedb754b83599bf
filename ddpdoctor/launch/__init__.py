"""Launching: the run dir, the injection bootstrap, starting and stopping the job."""
