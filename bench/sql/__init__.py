"""The sql section: AsyncTask's SQL broker next to Huey and procrastinate."""
