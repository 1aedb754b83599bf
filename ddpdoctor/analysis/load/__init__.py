"""Loading: run dirs, traces, flight-recorder dumps, attach facts and the user's source, read into a JobView."""
