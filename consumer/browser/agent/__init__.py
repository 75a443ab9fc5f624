"""The browser agent: a program of its own (``scrapefleet-browser-agent``), run as the browser's
user, that starts and ends the stacks for a consumer holding no capability; its protocol and
the consumer's client."""
