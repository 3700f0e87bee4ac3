"""Learners and networks (SAC family, encoders), export for on-robot inference."""
