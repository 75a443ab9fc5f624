"""A page's text as a browser reads it: its charset, and its title as ``document.title``.

Apart from fetching (common.http.client) because it needs no request: ``http_get`` and
``crawl`` use it on what they fetched, and it is tested on bytes alone. Charsets follow the
WHATWG's labels (w3lib); titles are read with ``html.parser``: entities decoded, whitespace
collapsed, bounded.
"""

from __future__ import annotations

import codecs
import re
from html.parser import HTMLParser

from w3lib.encoding import html_to_unicode

TITLE_MAX_CHARS = 1024
TITLE_SCAN_BYTES = 1024 * 1024  # the title is looked for in this much of the body
FEED_CHARS = 64 * 1024  # the parser is fed this much text at a time, and stops at the title's end

_ASCII_SPACE = re.compile(r"[\t\n\f\r ]+")
SNIFF_BYTES = 64 * 1024  # an undeclared page's charset is guessed from this much of it


def decode_html(body: bytes, content_type: str | None) -> str:
    """The page's text as a browser decodes it (w3lib's html_to_unicode): a BOM, else the
    Content-Type charset, else a <meta> one, else UTF-8 if the start of the body is valid
    UTF-8 and Windows-1252 if not. Charset names are the WHATWG's labels, so ``iso-8859-1`` and
    ``latin1`` are Windows-1252 (curly quotes and the euro sign, not C1 controls). Bytes the
    charset cannot decode become U+FFFD."""
    return decode_page(body, content_type)[0]


def decode_page(body: bytes, content_type: str | None) -> tuple[str, str]:
    """decode_html's text, and the charset it was decoded with (Python's codec name): the
    charset a browser encodes the page's query strings in."""
    encoding, text = html_to_unicode(content_type, body, auto_detect_fun=_sniff)
    return text, encoding


def _sniff(body: bytes) -> str:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(body[:SNIFF_BYTES], final=len(body) <= SNIFF_BYTES)
    except UnicodeDecodeError:
        return "cp1252"
    return "utf-8"


class _TitleParser(HTMLParser):
    """Collects the text of the first <title> outside <svg>. The title's content is text to a
    browser (RCDATA): a tag inside it is kept as written, whichever way this Python's parser
    reports it."""

    def __init__(self, keep_chars: int) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.found = False
        self.done = False
        self._inside = False
        self._svg = 0
        self._room = keep_chars

    def _keep(self, text: str) -> None:
        if self._room > 0:
            self.parts.append(text[: self._room])
            self._room -= len(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._inside:
            self._keep(self.get_starttag_text() or "")
        elif tag == "svg":
            self._svg += 1
        elif tag == "title" and not self._svg and not self.done:
            self._inside = self.found = True

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._inside:
            self._keep(self.get_starttag_text() or "")

    def handle_endtag(self, tag: str) -> None:
        if self._inside:
            if tag == "title":
                self._inside = False
                self.done = True
            else:
                self._keep(f"</{tag}>")
        elif tag == "svg" and self._svg:
            self._svg -= 1

    def handle_data(self, data: str) -> None:
        if self._inside:
            self._keep(data)


def parse_title(body: bytes, content_type: str | None = None) -> str | None:
    """The page's title as ``document.title`` gives it (entities decoded, ASCII whitespace
    collapsed and stripped), cut to ``TITLE_MAX_CHARS``; None when the page has no <title>."""
    head = body[:TITLE_SCAN_BYTES]
    text = decode_html(head, content_type)
    # Collapsing can only shorten the text: keep a margin of raw characters beyond the cap.
    parser = _TitleParser(keep_chars=4 * TITLE_MAX_CHARS)
    for start in range(0, len(text), FEED_CHARS):
        parser.feed(text[start : start + FEED_CHARS])
        if parser.done:
            break
    else:
        parser.close()
    if not parser.found:
        return None
    title = _ASCII_SPACE.sub(" ", "".join(parser.parts)).strip(" ")
    return title[:TITLE_MAX_CHARS]
