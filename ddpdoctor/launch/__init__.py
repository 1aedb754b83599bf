"""Launching: the injection bootstrap, the job's argv and environment, `ddpdoctor run`."""
