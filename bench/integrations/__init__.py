"""The integrations section: each runtime with tracking attached, against itself without."""
