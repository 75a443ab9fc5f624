"""One base exception; driver errors (psycopg, paramiko, selenium) are wrapped where they enter."""


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


class StackError(ScrapefleetError):
    """The browser stack (Xvfb, Grid, Chromium) failed; not the job's fault."""


class JobFailed(ScrapefleetError):
    """A job waited for ended failed or cancelled (the Python API's ``Client.map``)."""

    def __init__(self, job_id: int, status: str, error: str | None) -> None:
        last = (error or "").strip().splitlines()
        super().__init__(f"job {job_id} {status}: {last[-1] if last else 'no error recorded'}")
        self.job_id = job_id
        self.status = status
        self.error = error
