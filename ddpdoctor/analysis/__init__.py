"""Analysis: load run dirs into a JobView, align collectives, run the detectors."""
