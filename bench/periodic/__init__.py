"""The periodic section: what many schedules cost the workers, and how late their ticks come."""
