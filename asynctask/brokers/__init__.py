"""Storage backends. Only Redis (Sidekiq's wire format) exists so far."""
