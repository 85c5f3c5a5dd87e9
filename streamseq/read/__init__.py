"""Reading: per-process handles on what streams read from."""
