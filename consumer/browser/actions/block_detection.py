"""How ``fetch_page`` and ``screenshot`` know a block page: the host's rules (settings
``block_statuses``, ``block_selector``, ``block_title_pattern``), any one of which matching is a
block.

The decision is a pure function of what the page read gave (its status, its title, whether the
selector matched). The title pattern is the operator's, the title the page's: it runs on the
bounded engine (common.actions.bounded_regex: the GIL released, a timeout) over the title's
first BLOCK_TITLE_MAX_CHARS characters, since stdlib ``re`` once held the GIL 9.4 s on a
20,000-character title and stalled the consumer's every thread (its heartbeats too).

The rules reach the action through a context variable the runner sets for the job's thread, so
an action's signature stays ``(driver, params)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from scrapefleet.common.actions.bounded_regex import Pattern, bounded_search, compile_pattern
from scrapefleet.common.constants import BLOCK_TITLE_MAX_CHARS
from scrapefleet.common.settings import Settings

__all__ = ["NO_RULES", "BlockRules", "block_reason", "block_rules_in_effect", "blocking_rules"]


@dataclass(frozen=True)
class BlockRules:
    statuses: frozenset[int] = frozenset()
    selector: str | None = None
    title_pattern: Pattern | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> BlockRules:
        pattern = settings.block_title_pattern
        return cls(
            statuses=frozenset(settings.block_statuses),
            selector=settings.block_selector,
            title_pattern=compile_pattern(pattern, "block_title_pattern") if pattern else None,
        )

    @property
    def reads_page(self) -> bool:
        """A rule that needs the page's title or elements, not only its status."""
        return self.selector is not None or self.title_pattern is not None


NO_RULES = BlockRules()


def block_reason(
    rules: BlockRules, *, status: int | None, title: str | None, selector_matched: bool
) -> str | None:
    """Why the page is a block page, or None when no rule matches."""
    if status is not None and status in rules.statuses:
        return f"HTTP {status} is a block status"
    if rules.selector is not None and selector_matched:
        return f"block selector {rules.selector!r} matched"
    if rules.title_pattern is not None and title:
        # A block page's title is short; a page's 20,000-character one is not searched whole.
        # Past its time bound the search raises PatternTimeout (a permanent failure naming
        # the setting): the same page would run it out again.
        shown = title[:BLOCK_TITLE_MAX_CHARS]
        if bounded_search(rules.title_pattern, shown, "block_title_pattern"):
            return f"title {title[:200]!r} matches the block pattern"
    return None


_RULES: ContextVar[BlockRules] = ContextVar("scrapefleet_block_rules", default=NO_RULES)


def block_rules_in_effect() -> BlockRules:
    """The rules of the job running in this thread (none outside a job)."""
    return _RULES.get()


@contextmanager
def blocking_rules(rules: BlockRules) -> Iterator[None]:
    """``rules`` for what runs inside (the runner wraps a job's action in it)."""
    token = _RULES.set(rules)
    try:
        yield
    finally:
        _RULES.reset(token)
