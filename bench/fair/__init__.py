"""The fair section: what serving a queue in turns by share costs its drain."""
