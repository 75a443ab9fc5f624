"""Webhooks: due deliveries POSTed, signed, to the addresses the egress policy allows."""
