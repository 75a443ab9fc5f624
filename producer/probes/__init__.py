"""The producer's probes: each host asked what it is doing (locally or over SSH), and what the
answers mean for the host's state."""
