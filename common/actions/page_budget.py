"""A page's extraction bounded in time as a whole: the links a crawl's ``include``/``exclude``
patterns keep, and every field (regexes, CSS selectors, element texts) together.

Each regex search is bounded already (common.actions.bounded_regex), but a page of 1,000 hostile
links ran the include pattern 1,000 times (10 s here), and a CSS selector such as ``div ~ div ~
div`` is cubic in the page's elements (14 s on a 36 KB page). The action opens a budget for the
page (``page_budget``); the regexes take at most what is left of it, and a CSS selector is run
with a check on every element it visits (a predicate calling ``sf:within()``, which raises once
the budget is spent: lxml stops the evaluation there). Running out is ExtractionTimeout, a
``permanent`` failure naming the field (the same page would run out again).

XPath expressions a user writes are not instrumented: the budget is checked before each one and
between its matches, not while libxml2 evaluates it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from scrapefleet.common.actions.error_classes import Permanent
from scrapefleet.common.constants import PAGE_EXTRACTION_S

__all__ = [
    "BUDGET_NAMESPACES",
    "ExtractionTimeout",
    "PageBudget",
    "budgeted_css",
    "check_budget",
    "page_budget",
    "remaining_s",
]

_NS = "urn:scrapefleet:page-budget"
BUDGET_NAMESPACES = {"sf": _NS}


class ExtractionTimeout(Permanent, RuntimeError):
    """A page's links and fields together took longer than its budget."""


@dataclass(frozen=True)
class PageBudget:
    seconds: float
    deadline: float
    clock: Callable[[], float]

    def remaining_s(self) -> float:
        return self.deadline - self.clock()

    def check(self, what: str) -> None:
        if self.remaining_s() <= 0:
            raise ExtractionTimeout(
                f"{what}: the page's links and fields took more than {self.seconds:g} s"
                " (its patterns and selectors together); it is not tried again"
            )


_CURRENT: ContextVar[PageBudget | None] = ContextVar("page_budget", default=None)
_WHAT: ContextVar[str] = ContextVar("page_budget_what", default="fields")


@contextmanager
def page_budget(
    seconds: float = PAGE_EXTRACTION_S, clock: Callable[[], float] = time.monotonic
) -> Iterator[PageBudget]:
    """The page's budget for the block; inside one already open, that one (a page has one)."""
    current = _CURRENT.get()
    if current is not None:
        yield current
        return
    budget = PageBudget(seconds, clock() + seconds, clock)
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


def remaining_s() -> float | None:
    """What is left of the open budget (None: none is open)."""
    budget = _CURRENT.get()
    return None if budget is None else budget.remaining_s()


def check_budget(what: str) -> None:
    """ExtractionTimeout naming ``what`` when the open budget is spent."""
    budget = _CURRENT.get()
    if budget is not None:
        budget.check(what)


def budgeted_css(page: Any, css: str, what: str) -> Any:
    """``page.css(css)`` (a parsel Selector) with the open budget checked at every element the
    selector visits; ExtractionTimeout names ``what``."""
    token = _WHAT.set(what)
    try:
        return page.xpath(_css_to_budgeted_xpath(css), namespaces=BUDGET_NAMESPACES)
    finally:
        _WHAT.reset(token)


@lru_cache(maxsize=256)
def _css_to_budgeted_xpath(css: str) -> str:
    return _translator().css_to_xpath(css)


@lru_cache(maxsize=1)
def _translator() -> Any:
    from lxml import etree
    from parsel.csstranslator import HTMLTranslator

    class BudgetedTranslator(HTMLTranslator):
        """parsel's translation (its ::text and ::attr() too), each step with ``sf:within()``
        first in its predicate."""

        def xpath_element(self, selector: Any) -> Any:
            xpath = super().xpath_element(selector)
            condition = xpath.condition
            xpath.condition = "sf:within()"
            if condition:
                xpath.add_condition(condition)
            return xpath

    etree.FunctionNamespace(_NS)["within"] = _within
    return BudgetedTranslator()


def _within(_context: Any) -> bool:
    check_budget(_WHAT.get())
    return True
