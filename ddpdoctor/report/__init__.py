"""ddpdoctor.report."""
