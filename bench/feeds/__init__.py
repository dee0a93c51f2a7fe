"""The feeds section: what feeding a task costs its drain."""
