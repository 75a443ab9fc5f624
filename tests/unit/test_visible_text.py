"""An element's text over HTTP, laid out as the browser lays it out (no I/O)."""

from __future__ import annotations

import pytest

from scrapefleet.common.actions.page_fields import FieldSpec, read_fields

pytestmark = pytest.mark.timeout(10)

PAGE = """<html><body>
<div class="item"><h2>Widget</h2><span>$1.50</span></div>
<ol><li>one</li><li>two</li></ol>
<div id="d">a<script>var x = 1;</script>b<noscript>enable JS</noscript> c</div>
<script id="data">{"k": 1}</script>
</body></html>"""


def _read(**specs: dict[str, object]) -> dict[str, object]:
    fields = {name: FieldSpec.model_validate(spec) for name, spec in specs.items()}
    return read_fields(PAGE, "http://a.test/", fields)


def test_blocks_are_lines_and_words_are_not_glued() -> None:
    assert _read(item={"css": "div.item"}, list={"css": "ol"}) == {
        "item": "Widget\n$1.50",
        "list": "one\ntwo",
    }


def test_what_a_browser_does_not_show_is_left_out_and_the_page_stays_whole() -> None:
    assert _read(
        d={"css": "#d"},
        script={"css": "script#data"},  # an element's text: none, as in the browser
        data={"xpath": "//script[@id='data']/text()"},  # its content, by XPath
        after={"css": "#d script", "all": True},  # still in the page for other fields
    ) == {"d": "ab c", "script": "", "data": '{"k": 1}', "after": [""]}
