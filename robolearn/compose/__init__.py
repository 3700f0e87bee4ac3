"""The composition layer: configuration (launch-file tables, CLI strings, folder paths) becomes
objects here, above every layer it wires together (docs/DEVELOPING.md)."""
