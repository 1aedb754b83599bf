"""ddpdoctor.analysis."""
