"""The leading producer's background jobs beside assignment: webhooks, retention, schedules,
metrics."""
