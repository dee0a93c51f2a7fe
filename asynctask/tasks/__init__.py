"""Tasks, the application's side of tracking: ``operations`` creates, cancels and retries
them (pushing their jobs through a Client), ``service`` offers those and the read model as
one object (``asynctask.Tracking``)."""
