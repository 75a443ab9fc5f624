"""What a browser job may ask for, decided without a browser: its options, its isolation level
and its profile. The consumer applies them (scrapefleet.consumer.browser)."""
