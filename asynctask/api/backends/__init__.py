"""The read model's backends (``api.backend.Backend``): ``redis`` reads Sidekiq's keys,
``sql`` the SQL broker's tables."""
