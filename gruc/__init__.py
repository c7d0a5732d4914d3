"""gruc."""
