"""Crawls: the ``crawl`` action and its pieces (links kept by the crawl's rules, robots.txt,
sitemaps as seeds)."""
