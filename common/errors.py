"""One base exception; driver errors (psycopg, paramiko, selenium) are wrapped where they enter."""

from scrapefleet.common import masking
from scrapefleet.common.error_lines import last_line


class ScrapefleetError(Exception):
    """Base of every error scrapefleet raises on purpose."""


class SettingsError(ScrapefleetError):
    """A setting is invalid; the message names it."""


class DatabaseUnavailable(ScrapefleetError):
    """The database cannot be reached (connection refused, dropped, timed out)."""


class SchemaOutOfDate(ScrapefleetError):
    """A table, column or function this code uses is missing: the schema needs `db upgrade`."""


class SubmitError(ScrapefleetError):
    """A job cannot be submitted: unknown kind, payload that does not validate, bad line."""


class UnknownAction(SubmitError):
    """No action is registered under this kind."""


class ProbeError(ScrapefleetError):
    """A host probe failed; the message is the reason an operator reads in SQL."""


class NotFound(ScrapefleetError):
    """The job or host named does not exist."""


class HostBusy(ScrapefleetError):
    """A host's row is locked by another session (its consumer may hold it): try again."""


class HostOffline(ScrapefleetError):
    """An operator asked an offline host to take work: only its consumer answering the
    producer's probes brings it back (nothing changed)."""


class StackError(ScrapefleetError):
    """The browser stack (Xvfb, Grid, Chromium) failed; not the job's fault."""


MAX_CAUSES = 20  # a chain of causes is followed this far (a cycle or a silly depth ends here)


def timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` or one of its causes is a timeout (socket, urllib3, Selenium, a
    websocket): the stack answered too late, which more time or less load would fix, as
    opposed to a stack that is gone."""
    seen: BaseException | None = exc
    for _ in range(MAX_CAUSES):
        if seen is None:
            return False
        reason = getattr(seen, "reason", None)  # urllib3's MaxRetryError wraps its cause
        if _is_timeout(seen) or (isinstance(reason, BaseException) and _is_timeout(reason)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _is_timeout(exc: BaseException) -> bool:
    # By name for the libraries' own (urllib3's ReadTimeoutError, Selenium's TimeoutException,
    # websocket-client's WebSocketTimeoutException), so that importing this needs none of them.
    return isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__


class JobFailed(ScrapefleetError):
    """A job waited for ended failed or cancelled (the Python API's ``Client.map``)."""

    def __init__(self, job_id: int, status: str, error: str | None) -> None:
        # A consumer wrote the error: a cookie or a credential it quotes is not shown back.
        last = last_line(masking.mask_text(error or ""))
        super().__init__(f"job {job_id} {status}: {last or 'no error recorded'}")
        self.job_id = job_id
        self.status = status
        self.error = error
