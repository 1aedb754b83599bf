"""ddpdoctor.launch."""
