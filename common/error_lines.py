"""An error in one line, for a log line, a status reason or a command's message.

An exception's first line says what went wrong: chromedriver appends its native stack trace
after it, SQLAlchemy the statement and its parameters. A traceback's last line does: the
frames come first. Every place that shortens an error does it through these two.
"""

from __future__ import annotations

__all__ = ["first_line", "last_line"]


def first_line(error: BaseException | str | None, *, named: bool = False) -> str:
    """The first non-blank line of ``error``, stripped.

    An exception speaks through the driver's error SQLAlchemy wraps (its ``orig``) and through
    Selenium's own message (its ``msg``, without the "Message: " str() adds); one that says
    nothing is its type's name. ``named`` puts the type's name first ("TimeoutError: ...").
    Text that says nothing (or None) is ""."""
    if error is None or isinstance(error, str):
        return _first(error or "")
    cause = getattr(error, "orig", None) or error
    if hasattr(cause, "msg"):  # Selenium's: str() adds "Message: " (and "None" for none)
        line = _first(cause.msg if isinstance(cause.msg, str) else "")
    else:
        line = _first(str(cause))
    kind = type(cause).__name__
    if named:
        return f"{kind}: {line}" if line else kind
    return line or kind


def last_line(text: str | None) -> str:
    """The last non-blank line of ``text``, stripped ("" when there is none): a traceback's
    says what went wrong."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _first(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
