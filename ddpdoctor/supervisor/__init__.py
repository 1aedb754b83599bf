"""ddpdoctor.supervisor."""
