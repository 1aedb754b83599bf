"""Process control: start the job in its own session, find every process of it, stop them all."""
