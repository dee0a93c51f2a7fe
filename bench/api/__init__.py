"""The api section: ``GET /api/tasks/<id>`` under load and POSTs of many items."""
