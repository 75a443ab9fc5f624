"""scrapefleet's fixed numbers (those no setting changes), each with its unit in its name.

A setting's default is written once, on its field in common.setting_groups
(``setting_default(name)`` reads it); code that needs a fixed number imports it from here rather
than writing a literal.
"""

from typing import Final

# Producer.
PRODUCER_ADVISORY_LOCK_KEY: Final = 0x5C_4A_9E_F1  # pg_advisory_lock key of the active producer
PENDING_SCAN_FACTOR: Final = 4  # read this many pending rows per free slot (lock keys skip some)
# A consumer whose heartbeat has not reached the database for this fraction of rescue_after_s
# ends its attempts itself and claims nothing until a heartbeat gets through: a host cut off
# from the database has stopped before the producer's rescue hands its jobs on.
SELF_FENCE_FRACTION: Final = 0.75
# A producer with no cycle (a standby: no try) for max(this many of its intervals, the floor)
# is down: a slow probe round or a GC pause must not read as an outage.
PRODUCER_STALE_INTERVALS: Final = 3
PRODUCER_STALE_MIN_S: Final = 10.0
PRODUCER_ROWS_KEEP_S: Final = 7 * 86400.0  # producers rows unseen this long are deleted

# Rate limits (common.jobs.rate_limits): per_minute counts attempts started in this trailing window.
RATE_WINDOW_S: Final = 60.0
# The window's use is read again this often; in between, the producer adds what it assigned.
RATE_WINDOW_REFRESH_S: Final = 1.0
# Keys (and kinds) read on their own for their little budget, at most this many a cycle.
RATE_TIGHT_MAX: Final = 100
RATE_FACTOR_MIN: Final = 1 / 16  # a key pushed back on is slowed to at most this of its limits
RATE_FACTOR_RECOVERY: Final = 1.25  # each completion on a slowed key scales its factor back up
PUSHBACK_LOG_EVERY_S: Final = 60.0  # a key's push-backs are warned of once per this, then summed


# Browser stack maintenance (consumer/browser/supervisor/stack_supervisor.py).
HUNG_SESSION_GRACE_S: Final = 15.0  # a timed-out job's thread still busy this long after its
#                                     session was killed -> the whole stack is restarted
REBOOT_WAIT_S: Final = 600.0  # reboot command ran but the host still runs -> restart instead
ARTIFACT_PRUNE_INTERVAL_S: Final = 3600.0  # failure artifacts past retention removed this often

# Retries.
BACKOFF_JITTER: Final = 0.2  # +/- this fraction of the delay, so retries do not stampede

# NOTIFY channels.
# A host's own channel is this, a digest of its name appended (common.db.channels); payload: the
# host's name.
CHANNEL_ASSIGNED: Final = "scrapefleet_assigned"
CHANNEL_FINISHED: Final = "scrapefleet_finished"  # payload: host name that freed a slot
CHANNEL_SUBMITTED: Final = "scrapefleet_submitted"  # by trigger, once per INSERT into jobs
CHANNEL_WEBHOOKS_DUE: Final = "scrapefleet_webhooks_due"  # by trigger, a delivery was enqueued

# The consumer status document (local state file, `scrapefleet-consumer status --json`).
STATUS_FORMAT_VERSION: Final = 1

DASHBOARD_PAGE_ROWS: Final = 50  # rows per dashboard list (failures, search results)
# A retry or cancel of more jobs than this asks first (CLI: a prompt or --yes; dashboard: a
# confirm step): one filter too broad must not cancel or revive a whole queue.
BULK_CONFIRM_OVER_JOBS: Final = 100
WEBHOOK_BATCH: Final = 50  # deliveries taken per statement (more statements while slots are free)
# POSTs in flight at once, in all and to one receiver (scheme://host:port): a fast receiver
# waits behind slow ones only while WEBHOOK_WORKERS / WEBHOOK_PER_RECEIVER of them are all slow.
WEBHOOK_WORKERS: Final = 100
WEBHOOK_PER_RECEIVER: Final = 2
# The bodies of the POSTs in flight together (as JSON text; a result may be 8 MiB): a hundred
# large results never sit in the producer at once. One body larger than this still goes, alone.
WEBHOOK_BODIES_IN_FLIGHT_BYTES: Final = 64 * 1024 * 1024
WEBHOOK_SCAN_ROWS: Final = 500  # due rows looked at per statement for receivers with room
WEBHOOK_WAKE_DEBOUNCE_S: Final = 0.02  # batch delivery notifications this long (producer.wakeup)

# Times a job may be handed back by failing hosts (crash, rescue, stack fault) before it fails:
# a release never uses an attempt, but a job that takes every host down must end somewhere.
MAX_RELEASES_PER_JOB: Final = 5
RETRY_AFTER_LIMIT_S: Final = 7 * 86400.0  # the most retry_after_max_s may be set to
# The most a consumer's role may write (migration 0031 refuses a later time): a retry's
# back-off is at most RETRY_AFTER_LIMIT_S, a timed-out attempt's lock linger at most this.
LOCK_LINGER_LIMIT_S: Final = 86400.0
# What a job row holds at most (migration 0031's CHECKs): a result (its JSON text), the last
# error (a traceback: the store keeps its head and its end) and the artifacts' paths. A host
# wrote tens of MB, which the producer then copied into a webhook and loaded whole.
RESULT_MAX_BYTES_LIMIT: Final = 8 * 1024 * 1024  # the most result_max_bytes may be set to
RESULT_MAX_BYTES: Final = 1024 * 1024  # result_max_bytes' default
LAST_ERROR_MAX_CHARS: Final = 64 * 1024
ARTIFACTS_MAX_BYTES: Final = 64 * 1024
# A spawned child's payload at most (spawn_children refuses a larger one, migration 0031), and
# spawn_per_host_per_minute's default: the children one host's role may insert a minute.
SPAWN_PAYLOAD_MAX_BYTES: Final = 64 * 1024
SPAWN_PER_HOST_PER_MINUTE: Final = 6000
# Sessions one consumer host's database role may hold at once (`db grant --connection-limit`):
# a consumer uses about six (its pool, its listener, its recorder's); a hostile one could
# otherwise take every connection the server has.
CONSUMER_CONNECTION_LIMIT: Final = 20

# Profiles (common.browser.profile_names).
PROFILE_DIR_FREE_WAIT_S: Final = 15.0  # for the last browser on a profile's directory to exit

# Crawls (common.crawl.action, common.crawl.robots).
ROBOTS_TTL_S: Final = 3600.0  # a site's robots.txt is read again after this long
ROBOTS_CACHE_SITES: Final = 1024  # sites whose robots.txt a consumer keeps at once
# RFC 9309 asks crawlers to read at least 500 KiB of a robots.txt; the rest is ignored.
ROBOTS_MAX_BYTES: Final = 512 * 1024
ROBOTS_TIMEOUT_S: Final = 10.0  # one robots.txt fetch, redirects included
# A robots.txt's Crawl-delay is obeyed up to this long (a site asking for more gets this).
MAX_CRAWL_DELAY_S: Final = 60.0
# A user's regular expression (crawl include/exclude, fields) runs at most this long on one
# text, with the GIL released (common.actions.bounded_regex); past it the attempt fails as
# permanent.
REGEX_TIMEOUT_S: Final = 1.0
# The block title pattern (a host setting) searches at most this much of a page's title.
BLOCK_TITLE_MAX_CHARS: Final = 1_000
# A page's links kept by a crawl's patterns and its fields, together, at most this long
# (common.actions.page_budget): 3,000 links and 20 fields of a real page take ~0.1 s.
PAGE_EXTRACTION_S: Final = 5.0
REGEX_MAX_INPUT_CHARS: Final = 2 * 1024 * 1024  # a field's regex sees this much of the page
# A page's script can grow its DOM without end (31 MB saved per attempt from a 200-byte page):
# a failed attempt's saved HTML is cut here (the artifact_html_max_bytes setting's default).
ARTIFACT_HTML_MAX_BYTES: Final = 2_000_000
