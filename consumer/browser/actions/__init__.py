"""What a browser job does (the built-in browser actions, the job's browser set up) and what a
failed one leaves (network log, artifacts)."""
