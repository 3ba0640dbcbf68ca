"""One module per actor, named after what it owns."""
