"""The spans a job's trace has and the attributes they carry (common.tracing): the reference
page (docs/reference/tracing.md) is generated from these."""

from __future__ import annotations

SPANS = {
    "scrapefleet.submit": "one job's submit (CLI or Python API), child of the caller's span",
    "scrapefleet.assign": "pending until assigned: starts when the job became pending",
    "scrapefleet.attempt": "one attempt on a consumer, from its claim to its outcome",
    "scrapefleet.claim": "the claim statement that took the attempt (child of the attempt)",
    "scrapefleet.run": "the action in its thread (child of the attempt)",
    "scrapefleet.browser.lease": "a browser session for the job: a new one or a reused one",
    "scrapefleet.browser.navigate": "the page load (the URL without its query)",
    "scrapefleet.browser.fields": "the page's fields, title and status read in one script",
    "scrapefleet.browser.artifacts": "a failed attempt's screenshot, HTML and network log",
    "scrapefleet.result_write": "the attempt's outcome written (child of the attempt)",
    "scrapefleet.webhook": "one POST of the job's webhook",
}
ATTRIBUTES = {
    "scrapefleet.job.id": "the job's id (every span but submit)",
    "scrapefleet.job.kind": "its action",
    "scrapefleet.job.rate_key": "its politeness limits' key",
    "scrapefleet.host": "the consumer host (assign, attempt, claim, run, result_write)",
    "scrapefleet.attempt": "the attempt's number, 1-based",
    "scrapefleet.claim": "the attempt's claim token",
    "scrapefleet.outcome": "completed, retry, failed, released, blocked (attempt); the "
    "delivery's delivered, failed, gave_up (webhook)",
    "scrapefleet.error_class": "of a failed or blocked attempt",
    "scrapefleet.pending_s": "seconds the job waited in pending (assign)",
    "scrapefleet.profile": "the persistent browser profile's name",
    "scrapefleet.isolation": "how fresh the job's browser is (lease)",
    "scrapefleet.session": "new, reused or replaced (lease)",
    "scrapefleet.jobs": "how many outcomes one write carried (result_write)",
    "scrapefleet.delivery.attempt": "the webhook delivery's attempt",
    "url.full": "the page's URL without user info, query and fragment (navigate)",
    "server.address": "the webhook receiver's host (webhook)",
}
