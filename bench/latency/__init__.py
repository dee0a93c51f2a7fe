"""The latency section: enqueue-to-start latency at a steady rate, one idle worker per system."""
