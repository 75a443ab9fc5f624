"""Identities a job goes out with: proxy pools (and, in common.browser, persistent profiles)."""
