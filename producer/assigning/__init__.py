"""Assignment: which pending job goes to which host (the pure plan), under the rate limits,
profiles and proxies, and what was assigned said once a minute."""
