"""Fields read from a page: one spec for every built-in action, applied here to HTML with
parsel (the selector library of Scrapy: lxml and cssselect).

A field is ``{"css": ...}`` or ``{"xpath": ...}``, optionally with ``attr`` (the attribute to
read; absent: the element's text laid out as the browser's, by visible_text), ``all``
(a list of every match, at most MAX_FIELD_VALUES, not the first) and ``re`` (a regular
expression searched in each value: its first group, else the whole match; a value it does not
match is dropped). ``re`` alone is searched in the page's HTML (its first REGEX_MAX_INPUT_CHARS
characters): that is the form a crawl's ``--field NAME=REGEX`` has always had, and a plain
string as a field is read as it. Each value is cut to MAX_FIELD_CHARS; a regex runs with a time
bound (common.actions.bounded_regex). ``fetch_page`` reads a CSS field in the browser (Selenium's
text, from the rendered page) and an XPath or ``re``-only one from the page's HTML here.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any
from urllib.parse import urljoin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from scrapefleet.common.actions.bounded_regex import (
    MAX_PATTERN_CHARS,
    Pattern,
    bounded_search,
    compile_pattern,
)
from scrapefleet.common.actions.page_budget import budgeted_css, check_budget, page_budget
from scrapefleet.common.constants import REGEX_MAX_INPUT_CHARS

__all__ = [
    "MAX_FIELDS",
    "MAX_FIELD_CHARS",
    "MAX_FIELD_VALUES",
    "BrowserPageFields",
    "FieldSpec",
    "PageFields",
    "read_fields",
    "refine",
]

MAX_FIELDS = 20
MAX_FIELD_CHARS = 1024  # a field's value is cut to this
MAX_FIELD_VALUES = 100  # an ``all`` field keeps this many values
MAX_SELECTOR_CHARS = 1000
_URL_ATTRS = frozenset({"href", "src", "action"})  # resolved against the page, as a browser does
# Elements whose content a browser does not show as text (scripting on).
_NOT_TEXT = frozenset({"script", "style", "noscript", "template"})
_NOT_TEXT_INSIDE = " | ".join(f".//{tag}" for tag in sorted(_NOT_TEXT))


class FieldSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    css: str | None = Field(default=None, min_length=1, max_length=MAX_SELECTOR_CHARS)
    xpath: str | None = Field(default=None, min_length=1, max_length=MAX_SELECTOR_CHARS)
    attr: str | None = Field(default=None, description="attribute to read; absent -> text")
    all: bool = Field(default=False, description="a list of every match, not the first")
    re: str | None = Field(
        default=None, min_length=1, max_length=MAX_PATTERN_CHARS, description="searched in it"
    )

    @field_validator("xpath")
    @classmethod
    def _xpath(cls, value: str | None) -> str | None:
        if value is not None:
            from lxml import etree

            try:
                etree.XPath(value)
            except etree.XPathError as exc:
                raise ValueError(f"invalid XPath: {exc}") from None
        return value

    @field_validator("re")
    @classmethod
    def _re(cls, value: str | None) -> str | None:
        if value is not None:
            compile_pattern(value, "re")
        return value

    @model_validator(mode="after")
    def _one_selector(self) -> FieldSpec:
        if self.css is not None and self.xpath is not None:
            raise ValueError("give css or xpath, not both")
        if self.css is None and self.xpath is None:
            if self.re is None:
                raise ValueError("give css, xpath or re")
            if self.attr is not None or self.all:
                raise ValueError("attr and all need css or xpath")
        return self


def _specs(value: Any) -> Any:
    """Today's form of a field, a regex over the page's HTML, as the spec it is."""
    if isinstance(value, dict):
        return {k: {"re": v} if isinstance(v, str) else v for k, v in value.items()}
    return value


def _css_parses(fields: dict[str, FieldSpec]) -> dict[str, FieldSpec]:
    """At most MAX_FIELDS, and the CSS selectors parsel will read checked at submit. (A
    browser reads fetch_page's own, with the browser's CSS: a selector cssselect lacks may
    still be one it knows.)"""
    from parsel.csstranslator import HTMLTranslator

    if len(fields) > MAX_FIELDS:
        raise ValueError(f"at most {MAX_FIELDS} fields")
    for name, spec in fields.items():
        if spec.css is not None:
            try:
                HTMLTranslator().css_to_xpath(spec.css)
            except SyntaxError as exc:  # cssselect's SelectorError
                raise ValueError(f"{name}.css: invalid CSS selector: {exc}") from None
    return fields


# A job's fields read from HTML here (crawl, crawl_browser, http_get), and fetch_page's, whose
# CSS fields the browser reads.
PageFields = Annotated[dict[str, FieldSpec], BeforeValidator(_specs), AfterValidator(_css_parses)]
BrowserPageFields = Annotated[dict[str, FieldSpec], BeforeValidator(_specs)]


def read_fields(html: str, page_url: str, fields: dict[str, FieldSpec]) -> dict[str, Any]:
    """Each field's value (None when nothing matched) or, with ``all``, values."""
    if not fields:
        return {}
    from parsel import Selector

    with page_budget():  # the page's, when the action opened it already
        page = Selector(text=html or "<html></html>") if _needs_tree(fields) else None
        found: dict[str, Any] = {}
        for name, spec in fields.items():
            what = f"field {name!r}"
            check_budget(what)
            pattern = None if spec.re is None else compile_pattern(spec.re, name)
            if spec.css is None and spec.xpath is None:
                found[name] = _matched(pattern, name, html[:REGEX_MAX_INPUT_CHARS])
                continue
            assert page is not None
            if spec.css is not None:
                matches = budgeted_css(page, spec.css, what)
            else:
                matches = page.xpath(spec.xpath or "")
            values = []
            for match in matches[: MAX_FIELD_VALUES if spec.all else None]:
                check_budget(what)
                value = _matched(pattern, name, _value(match, spec.attr, page_url))
                if value is not None:
                    values.append(value)
                    if not spec.all:
                        break
            first = values[0] if values else None
            found[name] = values[:MAX_FIELD_VALUES] if spec.all else first
    return found


def refine(spec: FieldSpec, name: str, value: Any) -> Any:
    """A value read elsewhere (the browser reads a CSS field) through the spec's ``re``, and
    cut to MAX_FIELD_CHARS: a list value value by value, the unmatched dropped."""
    pattern = None if spec.re is None else compile_pattern(spec.re, name)
    if isinstance(value, list):
        refined = (_matched(pattern, name, v if v is None else str(v)) for v in value)
        return [v for v in refined if v is not None][:MAX_FIELD_VALUES]
    return _matched(pattern, name, value if value is None else str(value))


def _needs_tree(fields: dict[str, FieldSpec]) -> bool:
    return any(spec.css is not None or spec.xpath is not None for spec in fields.values())


def _value(match: Any, attr: str | None, page_url: str) -> str | None:
    if not hasattr(match.root, "tag"):  # XPath gave a string, a number or an attribute's text
        return str(match.get())
    if attr is None:
        return visible_text(match.root)
    value = match.attrib.get(attr)
    if value is not None and attr in _URL_ATTRS:
        return urljoin(page_url, value.strip())
    return value if value is None else str(value)


def visible_text(element: Any) -> str:
    """An element's text laid out as the browser's (fetch_page's CSS fields, Selenium's
    ``.text``) on the same page: html-text's layout (a line break around blocks, list items,
    rows and paragraphs; a space between other elements' texts), each line's white space
    collapsed and trimmed, blank lines dropped; script, style, noscript and template left out.
    Without styles it cannot tell what CSS hides or lays out otherwise."""
    import html_text

    if element.tag in _NOT_TEXT:
        return ""
    if element.xpath(f"boolean({_NOT_TEXT_INSIDE})"):
        element = copy.deepcopy(element)  # the page's own tree stays whole for other fields
        for hidden in element.xpath(_NOT_TEXT_INSIDE):
            hidden.drop_tree()  # its tail, text after it, stays
    text = html_text.etree_to_text(element, guess_layout=True)
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def _matched(pattern: Pattern | None, name: str, value: str | None) -> str | None:
    if value is None:
        return None
    if pattern is not None:
        found = bounded_search(pattern, value, f"field {name!r}")
        if found is None:
            return None
        value = found.group(1) if found.re.groups else found.group(0)
        if value is None:
            return None
    return value[:MAX_FIELD_CHARS]
