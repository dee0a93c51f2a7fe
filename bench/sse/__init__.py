"""The sse section: one task's event stream fanned out to many clients."""
