"""Task definitions: reward source, success, termination, reset controller."""
