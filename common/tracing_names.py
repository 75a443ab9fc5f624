"""The spans a job's trace has and the attributes they carry (common.tracing): the reference
page (docs/reference/tracing.md) is generated from these."""

from __future__ import annotations

SPANS = {
    "scrapefleet.submit": "one job's submit (CLI or Python API): the root of the job's trace, or"
    " a child of the caller's span (Python API) or of its given traceparent; a submit of more"
    " than 1,000 jobs at once is one span in the caller's trace, which each job's trace links to",
    "scrapefleet.assign": "child of the submit: from when the job became pending (its insert, a"
    " retry's or a release's hand-back, a later not_before) to its assignment to a host; one"
    " per assignment",
    "scrapefleet.attempt": "child of the submit: one attempt on a consumer, from its claim to its"
    " outcome; a retry is a second one",
    "scrapefleet.claim": "child of the attempt: the claim statement that took it",
    "scrapefleet.run": "child of the attempt: the action in its thread (after the wait for a"
    " free thread)",
    "scrapefleet.browser.lease": "child of the run: a browser session for the job, new or reused"
    " (the wait for a slot, the session's start, the isolation's context)",
    "scrapefleet.browser.navigate": "child of the run: the page load",
    "scrapefleet.browser.fields": "child of the run: the page's fields, title and status, read in"
    " one script",
    "scrapefleet.browser.artifacts": "child of the run: a failed attempt's screenshot, HTML and"
    " network log",
    "scrapefleet.result_write": "child of the attempt (after its end): the statement that wrote"
    " its outcome, one span per job of a batch",
    "scrapefleet.webhook": "child of the submit: one delivery of the job's webhook (the POST and"
    " its record)",
}
ATTRIBUTES = {
    "scrapefleet.job.id": "the job's id (assign, attempt, result_write, webhook; the other spans"
    " are their children)",
    "scrapefleet.job.kind": "its action (submit, assign, attempt)",
    "scrapefleet.job.rate_key": "its politeness limits' key (submit, assign)",
    "scrapefleet.host": "the consumer host (assign, attempt, claim, run, result_write)",
    "scrapefleet.attempt": "the attempt's number, 1-based (attempt; assign: the one to come)",
    "scrapefleet.claim": "the attempt's claim token (attempt, claim)",
    "scrapefleet.outcome": "completed, retry, failed, released, blocked (attempt); the "
    "delivery's delivered, failed, gave_up (webhook)",
    "scrapefleet.error_class": "of a failed or blocked attempt",
    "scrapefleet.pending_s": "seconds the job waited in pending (assign)",
    "scrapefleet.profile": "the persistent browser profile's name (assign, attempt)",
    "scrapefleet.proxy_pool": "the proxy pool the job goes out through (attempt)",
    "scrapefleet.proxy_id": "the leased proxy's row in `proxies`, never its URL (attempt)",
    "scrapefleet.isolation": "how fresh the job's browser is (lease)",
    "scrapefleet.session": "new, reused or replaced (lease)",
    "scrapefleet.jobs": "how many outcomes one write carried (result_write), how many jobs a"
    " bulk submit carried (submit)",
    "scrapefleet.delivery.attempt": "the webhook delivery's attempt",
    "error.type": "the class of what a span's work raised (never its message)",
    "url.full": "the page's URL without user info, query and fragment (navigate)",
    "server.address": "the webhook receiver's host and port (webhook)",
}
