"""The ceiling section: ``redis-benchmark`` of the commands on AsyncTask's hot path."""
