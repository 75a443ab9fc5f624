"""Read-only queries shared by the daemons and the tools: jobs, progress, results, producers.
Writes are in scrapefleet.common.store."""
