"""Actions: what a job's ``kind`` means. The registry, the built-in actions and their params,
the fields they read from a page, the jobs they spawn, and how their failures are classed and
retried."""
