"""The admin CLI's command groups, one module each (``scrapefleet <group> ...``)."""
