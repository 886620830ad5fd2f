"""The code location's extra sensors (the demo feeder)."""
