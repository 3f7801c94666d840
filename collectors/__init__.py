"""Collectors: sources of telemetry (real tools, and the simulator) registered by name."""
