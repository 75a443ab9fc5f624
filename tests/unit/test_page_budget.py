"""A page's extraction budget, on an injected clock (no I/O)."""

from __future__ import annotations

import pytest
from parsel import Selector

from scrapefleet.common.actions.bounded_regex import bounded_search, compile_pattern
from scrapefleet.common.actions.error_classes import ErrorClass, classify
from scrapefleet.common.actions.page_budget import (
    ExtractionTimeout,
    budgeted_css,
    check_budget,
    page_budget,
    remaining_s,
)
from tests.unit.test_lifecycle import FakeClock

pytestmark = pytest.mark.timeout(10)


def test_one_budget_per_page_however_deep_the_calls_open_it() -> None:
    clock = FakeClock()
    assert remaining_s() is None
    with page_budget(5, clock):
        clock.now += 3
        with page_budget(5, clock):  # read_fields inside the crawl's page: the same budget
            assert remaining_s() == 2
        clock.now += 2
        with pytest.raises(ExtractionTimeout, match=r"^include: the page's links and fields"):
            check_budget("include")
        with pytest.raises(ExtractionTimeout) as spent:  # a regex gets no time at all
            bounded_search(compile_pattern("a", "f"), "a", "field 'f'")
        assert classify(spent.value) is ErrorClass.PERMANENT
    assert remaining_s() is None
    check_budget("anything")  # no budget open: nothing to run out


def test_a_selector_is_stopped_where_it_runs_out_and_keeps_its_meaning() -> None:
    page = Selector(text='<div class="a"><p>x</p><p>y</p></div><p>z</p>')
    with page_budget(5):
        assert budgeted_css(page, "div.a p::text", "f").getall() == ["x", "y"]
        for css in ("p:nth-child(2)", "div ~ p", "div > p:first-child", "p::attr(class)"):
            assert budgeted_css(page, css, "f").getall() == page.css(css).getall(), css
    clock = FakeClock()
    with page_budget(5, clock):
        clock.now += 6
        with pytest.raises(ExtractionTimeout, match=r"^field 'slow'"):
            budgeted_css(page, "div ~ p", "field 'slow'")
