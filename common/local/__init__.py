"""The embedded default: the demo, its site, a local fleet of subprocesses, embedded PostgreSQL."""
