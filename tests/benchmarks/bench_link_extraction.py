"""Link extraction on a 1 MiB page of 3,000 links: the CPU time of
common.crawl.links.extract_links (median of 5), for the docs (docs/crawling.md). A figure,
never pass/fail.

    .venv/bin/python -m tests.benchmarks.bench_link_extraction
"""

from __future__ import annotations

import statistics
import time

from scrapefleet.common.crawl.links import extract_links

LINKS = 3000
PAGE_BYTES = 1024 * 1024


def page() -> str:
    # Markup as dense as a documentation page's: short elements with classes, inline code.
    word = '<span class="w">lorem</span> <em>ipsum</em> <code class="c">dolor()</code> '
    filler = '<div class="para">' + word * 4 + "</div>\n"
    anchors = [
        f'<a href="/docs/section-{i}/page.html?x={i}#top">link {i}</a>\n' for i in range(LINKS)
    ]
    body = "".join(a + filler for a in anchors)
    body += "<p>" + "x" * max(0, PAGE_BYTES - len(body)) + "</p>"
    return f"<!doctype html><html><head><title>Links</title></head><body>{body}</body></html>"


def main() -> None:
    html = page()
    times = []
    for _ in range(5):
        started = time.process_time()
        links = extract_links(html, "http://docs.test/")
        times.append(time.process_time() - started)
    print(
        f"{len(html.encode()) / 2**20:.2f} MiB, {len(links)} links:"
        f" median {statistics.median(times) * 1000:.0f} ms (min {min(times) * 1000:.0f})"
    )


if __name__ == "__main__":
    main()
