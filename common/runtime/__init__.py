"""What both daemons run on: their lifecycle, log lines, systemd's notify protocol, metrics."""
