"""Plain HTTP for jobs: the client behind ``http_get`` and ``crawl``, what a job may ask of a
request, and the deadline and cancellation every request runs under."""
