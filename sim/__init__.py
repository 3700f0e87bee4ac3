"""MuJoCo backends and assets (arm, RC car), dm_control adapter, domain randomization."""
