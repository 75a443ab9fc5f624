"""Reading an ``http_get`` response: its body, bounded after decompression, and the headers a
job's result keeps.

Apart from the request (common.http.client) because what is read is bounded by other rules
than what is sent: at most ``max_body_bytes`` of body after decompression (gzip and deflate are
decoded here with a bounded output, so a small compressed body cannot expand past the cap),
every chunk within the request's deadline; and the first ``RESULT_MAX_HEADERS`` headers, each
cut, for the result a job stores.
"""

from __future__ import annotations

import time
import zlib

import httpx

from scrapefleet.common.http.pooling_transport import DeadlineExceeded

READ_CHUNK = 64 * 1024

RESULT_MAX_HEADERS = 50  # response headers kept in the result, the first ones
RESULT_HEADER_CHARS = 1024  # each value cut to this


class _BoundedDecoder:
    """gzip or deflate decoding whose output never exceeds what the caller asks for."""

    def __init__(self, encoding: str) -> None:
        self._deflate = encoding == "deflate"
        # deflate is meant to be zlib-wrapped, yet some servers send it raw.
        self._z = zlib.decompressobj(zlib.MAX_WBITS if self._deflate else 16 + zlib.MAX_WBITS)
        self._first = True

    def feed(self, data: bytes, max_out: int) -> tuple[bytes, bool]:
        """Up to ``max_out`` bytes of output, and whether more output is pending."""
        try:
            out = self._z.decompress(data, max_out)
        except zlib.error:
            if not (self._deflate and self._first):
                raise
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._z.decompress(data, max_out)
        self._first = False
        return out, bool(self._z.unconsumed_tail)


def read_body(
    response: httpx.Response, max_bytes: int, deadline: float
) -> tuple[bytes, bool, bool]:
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    decoder = _BoundedDecoder(encoding) if encoding in ("gzip", "x-gzip", "deflate") else None
    decoded = decoder is not None or encoding in ("", "identity")
    body = bytearray()
    for chunk in response.iter_raw(READ_CHUNK):
        if time.monotonic() >= deadline:
            raise DeadlineExceeded
        room = max_bytes - len(body)
        try:
            out, pending = decoder.feed(chunk, room + 1) if decoder else (chunk, False)
        except zlib.error as exc:
            raise RuntimeError(f"the {encoding} body from {response.url} is corrupt") from exc
        if len(out) > room or pending:
            body += out[:room]
            return bytes(body), True, decoded
        body += out
    return bytes(body), False, decoded


def bounded_headers(headers: httpx.Headers) -> dict[str, str]:
    """The first ``RESULT_MAX_HEADERS`` header names (lower case), each value cut to
    ``RESULT_HEADER_CHARS``; a repeated header's values joined by ", " (Set-Cookie's by a
    newline: its values hold commas)."""
    kept: dict[str, str] = {}
    for name, value in headers.multi_items():
        if name in kept:
            joined = kept[name] + ("\n" if name == "set-cookie" else ", ") + value
            kept[name] = joined[:RESULT_HEADER_CHARS]
        elif len(kept) < RESULT_MAX_HEADERS:
            kept[name] = value[:RESULT_HEADER_CHARS]
    return kept
