"""The flow section: what concurrency keys cost the queue."""
