"""Persistent browser profiles and proxy pools: bound and leased as jobs are assigned, and
an operator's commands on them."""
