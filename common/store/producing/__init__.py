"""The producer's writes: assignment under the rate limits, probe results, its own rows,
webhook deliveries, retention."""
