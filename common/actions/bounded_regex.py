"""Regular expressions that users give (a crawl's include/exclude, fields), run with a bound.

Python's ``re`` backtracks with the GIL held: a pattern like ``.*\\?.*sort=`` on one hostile
2,000-character link ran 4.7 s, and every other thread of the consumer (its heartbeats) with it.
These run on the ``regex`` engine instead, which takes a timeout and releases the GIL while it
matches (``concurrent=True``): a search past REGEX_TIMEOUT_S raises PatternTimeout, a
``permanent`` failure (the same page would run out again) naming the pattern. The syntax is
``re``'s (``regex``'s version 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import regex

from scrapefleet.common.actions.error_classes import Permanent
from scrapefleet.common.actions.page_budget import check_budget, remaining_s
from scrapefleet.common.constants import REGEX_TIMEOUT_S

__all__ = [
    "MAX_PATTERNS",
    "MAX_PATTERN_CHARS",
    "Pattern",
    "PatternTimeout",
    "bounded_search",
    "compile_pattern",
    "compile_patterns",
]

MAX_PATTERN_CHARS = 1000
MAX_PATTERNS = 50
Pattern = regex.Pattern[str]


class PatternTimeout(Permanent, RuntimeError):
    """A user's pattern ran past its time bound on a page."""


def compile_pattern(pattern: str, field: str) -> Pattern:
    """``pattern`` compiled; ValueError names the field."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"{field}: longer than {MAX_PATTERN_CHARS} characters")
    try:
        return regex.compile(pattern)
    except (regex.error, OverflowError, RecursionError) as exc:
        raise ValueError(f"{field}: not a valid regular expression: {exc}") from None


def compile_patterns(patterns: Sequence[str], field: str) -> tuple[Pattern, ...]:
    """The patterns compiled; ValueError names the field and the first bad pattern."""
    if len(patterns) > MAX_PATTERNS:
        raise ValueError(f"{field}: {len(patterns)} patterns, at most {MAX_PATTERNS}")
    return tuple(compile_pattern(p, f"{field}[{i}]") for i, p in enumerate(patterns))


def bounded_search(
    pattern: Pattern, text: str, what: str, *, timeout_s: float = REGEX_TIMEOUT_S
) -> regex.Match[str] | None:
    """``pattern.search(text)`` within ``timeout_s``, the GIL released; PatternTimeout names
    ``what`` (the field or rule the pattern is) when it runs out, ExtractionTimeout when the
    page's budget (common.actions.page_budget), if one is open, runs out first."""
    left = remaining_s()
    if left is not None:
        check_budget(what)
        timeout_s = min(timeout_s, left)
    try:
        return pattern.search(text, timeout=timeout_s, concurrent=True)
    except TimeoutError:
        check_budget(what)
        raise PatternTimeout(
            f"{what}: the pattern {pattern.pattern[:100]!r} ran past {timeout_s:g} s on"
            f" {len(text):,} characters; it is not tried again"
        ) from None
