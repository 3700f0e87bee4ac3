"""Resets without teleports: reset controllers, their supervisor, autonomous practice, learned
forward/backward resets, the operator prompt and reset statistics (see docs/resets.md)."""
