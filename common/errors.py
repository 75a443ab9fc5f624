"""One base exception; driver errors (psycopg, paramiko, selenium) are wrapped where they enter."""


class ScrapefleetError(Exception):
    """Base of every error scrapefleet raises on purpose."""


class SettingsError(ScrapefleetError):
    """A setting is invalid; the message names it."""


class DatabaseUnavailable(ScrapefleetError):
    """The database cannot be reached (connection refused, dropped, timed out)."""


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
