"""ddpdoctor.trace."""
