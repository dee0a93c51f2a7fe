"""The memory section: RSS of one worker process, idle and while it runs many jobs."""
