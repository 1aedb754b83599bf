"""`ddpdoctor attach`: diagnose a running job that ddpdoctor did not start."""
