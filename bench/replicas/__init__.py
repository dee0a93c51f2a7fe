"""What writes that wait for a replica cost (``python -m bench.replicas``)."""
