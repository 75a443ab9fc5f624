"""`scrapefleet crawl URL` starts a crawl; `scrapefleet crawls show ID` tells how far it got.

    scrapefleet crawl https://example.org/ --depth 3 --include '/docs/' --max-pages 5000
    scrapefleet crawl --sitemap https://example.org/robots.txt --depth 2
    scrapefleet crawls show 41 [--json]

The crawl is a root ``crawl`` job (``crawl_browser`` with ``--browser``; common.crawl.action
and consumer.browser.actions.crawl_browser) at depth 0 and a ``crawl_runs`` row
with its bounds; every page's completion spawns the next pages (common.store.operating.crawls). Bad
input (a URL that is not http(s), a depth below 0, a pattern that is not a regular
expression) is refused with the option named and nothing inserted.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import click

from scrapefleet.common.errors import (
    DatabaseUnavailable,
    NotFound,
    ScrapefleetError,
    SubmitError,
)
from scrapefleet.common.ops.cli_context import echo

# common.crawl.action's kinds, without importing its pydantic models for `--help`.
CRAWL_KIND = "crawl"
BROWSER_CRAWL_KIND = "crawl_browser"
DEFAULT_DEPTH = 3
DEFAULT_MAX_PAGES = 10_000
MAX_PAGES_LIMIT = 10_000_000


@dataclass(frozen=True)
class CrawlRequest:
    url: str
    depth: int = DEFAULT_DEPTH
    max_pages: int = DEFAULT_MAX_PAGES
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)  # name -> regex, or a spec
    same_site: bool = True
    priority: int = 0
    browser: bool = False  # each page in a browser (crawl_browser), not over HTTP (crawl)
    obey_robots: bool = True  # False: fetch what the sites' robots.txt disallow
    sitemap: bool = False  # the URL is a sitemap, a sitemap index or a robots.txt
    same_domain: bool = False  # any host of the seed's registrable domain (www., docs., ...)

    @property
    def kind(self) -> str:
        return BROWSER_CRAWL_KIND if self.browser else CRAWL_KIND

    def seed(self) -> str:
        """The start URL in its one spelling; SubmitError names the option."""
        # Imported here: `--help` loads neither pydantic nor the URL libraries.
        from scrapefleet.common.crawl.links import normalise_url

        seed = normalise_url(self.url)
        if seed is None:
            raise SubmitError(f"url: {self.url!r} is not an http:// or https:// URL with a host")
        return seed

    def payload(self) -> dict[str, Any]:
        """The root job's payload, every rule checked; SubmitError names the option."""
        from pydantic import TypeAdapter

        from scrapefleet.common.actions.page_fields import PageFields
        from scrapefleet.common.crawl.links import compile_patterns, site_of

        seed = self.seed()
        if self.depth < 0:
            raise SubmitError(f"--depth: {self.depth} is below 0")
        if not 1 <= self.max_pages <= MAX_PAGES_LIMIT:
            raise SubmitError(f"--max-pages: must be between 1 and {MAX_PAGES_LIMIT}")
        try:
            compile_patterns(self.include, "--include")
            compile_patterns(self.exclude, "--exclude")
            for name, spec in self.fields.items():
                if isinstance(spec, str):
                    compile_patterns([spec], f"--field {name}")
            TypeAdapter(PageFields).validate_python(self.fields)
        except ValueError as exc:  # pydantic's ValidationError is one
            raise SubmitError(f"{_field_error(exc)}") from None
        # The seed may redirect to another host (python.org -> www.python.org): its job then
        # moves the crawl's site there (common.crawl.action.seed_redirect).
        payload: dict[str, Any] = {"url": seed, "site": site_of(seed), "seed": True}
        if self.include:
            payload["include"] = list(self.include)
        if self.exclude:
            payload["exclude"] = list(self.exclude)
        if self.fields:
            payload["fields"] = dict(self.fields)
        if not self.same_site:
            if self.same_domain:
                raise SubmitError("--same-domain: not with --any-site (which follows every site)")
            payload["same_site"] = False
        if self.same_domain:
            payload["same_domain"] = True
        if not self.obey_robots:
            payload["ignore_robots"] = True
        if self.sitemap:
            if self.browser:
                raise SubmitError("--sitemap: sitemaps are read over HTTP, not with --browser")
            payload["sitemap"] = True
        return payload


def _field_error(exc: ValueError) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        return f"field {where}: {message}" if where else f"field {message}"
    return str(exc)


def start(conn: Any, request: CrawlRequest, *, max_attempts: int) -> int:
    """Insert the crawl's root job and bounds (the caller's transaction); returns its id."""
    from scrapefleet.common import store
    from scrapefleet.common.actions.registry import get_action

    payload = request.payload()
    action = get_action(request.kind)
    action.validate(payload)  # the consumer will run exactly this
    seed = payload["url"]
    return store.start_crawl(
        conn,
        kind=request.kind,
        payload=payload,
        max_depth=request.depth,
        max_jobs=request.max_pages,
        seed=seed,
        dedupe_key=seed,
        priority=request.priority,
        max_attempts=max_attempts,
        needs_browser=action.needs_browser,
    )


def render_crawl(crawl: dict[str, Any]) -> list[str]:
    reached = "-" if crawl["depth_reached"] is None else crawl["depth_reached"]
    lines = [
        f"crawl {crawl['crawl_id']}: {crawl['seed'] or '(a job that spawned)'}",
        f"  bounds: depth {crawl['max_depth']}, {crawl['max_jobs']:,} jobs",
        f"  pages: {crawl['done']:,} done, {crawl['pending']:,} pending,"
        f" {crawl['failed']:,} failed, {crawl['cancelled']:,} cancelled"
        f" ({crawl['jobs']:,} job(s) in all)",
        f"  depth reached: {reached}",
    ]
    if crawl.get("site_moved"):
        lines.insert(1, f"  site: {crawl['site_moved']}")
    for depth, counts in sorted(crawl["by_depth"].items()):
        parts = ", ".join(f"{n:,} {status}" for status, n in sorted(counts.items()))
        lines.append(f"    depth {depth}: {parts}")
    return lines


@contextmanager
def _one_line_errors() -> Iterator[None]:
    from scrapefleet.common.db.engines import wrapped_errors

    try:
        with wrapped_errors():
            yield
    except ScrapefleetError as exc:
        echo(f"error: {exc}", err=True)
        sys.exit(1 if isinstance(exc, DatabaseUnavailable | NotFound) else 2)


@click.command("crawl")
@click.argument("url")
@click.option("--depth", type=int, default=DEFAULT_DEPTH, show_default=True, help="links deep")
@click.option("--max-pages", type=int, default=DEFAULT_MAX_PAGES, show_default=True)
@click.option("--include", multiple=True, metavar="REGEX", help="follow links matching one")
@click.option("--exclude", multiple=True, metavar="REGEX", help="never links matching one")
@click.option("--field", "fields", multiple=True, metavar="NAME=REGEX", help="keep from a page")
@click.option("--css", "css_fields", multiple=True, metavar="NAME=SELECTOR", help="its text")
@click.option("--xpath", "xpath_fields", multiple=True, metavar="NAME=XPATH", help="its text")
@click.option("--any-site", is_flag=True, help="follow links to other sites too")
@click.option(
    "--same-domain", is_flag=True, help="any host of the seed's domain (www., docs., ...)"
)
@click.option("--browser", is_flag=True, help="load each page in a browser (after its scripts)")
@click.option("--ignore-robots", is_flag=True, help="fetch what the site's robots.txt disallows")
@click.option(
    "--sitemap", is_flag=True, help="URL is a sitemap (index, .gz) or a robots.txt: its pages"
)
@click.option("--priority", type=click.IntRange(-1_000_000, 1_000_000), default=0)
@click.pass_obj
def crawl(
    obj: Any,
    url: str,
    depth: int,
    max_pages: int,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    fields: tuple[str, ...],
    css_fields: tuple[str, ...],
    xpath_fields: tuple[str, ...],
    any_site: bool,
    same_domain: bool,
    browser: bool,
    ignore_robots: bool,
    sitemap: bool,
    priority: int,
) -> None:
    """Start a crawl at URL: prints its id (see `scrapefleet crawls show ID`)."""
    with _one_line_errors():
        named: dict[str, Any] = {}
        for option, given, what in (
            ("--field", fields, "REGEX"),
            ("--css", css_fields, "SELECTOR"),
            ("--xpath", xpath_fields, "XPATH"),
        ):
            for spec in given:
                name, sep, text = spec.partition("=")
                if not sep or not name:
                    raise SubmitError(f"{option}: {spec!r} is not NAME={what}")
                if name in named:
                    raise SubmitError(f"{option}: the field {name!r} is given twice")
                named[name] = text if option == "--field" else {option[2:]: text}
        request = CrawlRequest(
            url,
            depth,
            max_pages,
            include,
            exclude,
            named,
            not any_site,
            priority,
            browser,
            obey_robots=not ignore_robots,
            sitemap=sitemap,
            same_domain=same_domain,
        )
        request.payload()  # refused before the database is even opened
        with obj.client.engine.begin() as conn:
            crawl_id = start(conn, request, max_attempts=obj.settings.max_attempts)
    echo(crawl_id)


@click.group("crawls")
def crawls() -> None:
    """How far the crawls got."""


@crawls.command("show")
@click.argument("crawl_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.pass_obj
def crawls_show(obj: Any, crawl_id: int, as_json: bool) -> None:
    """Pages done / pending / failed, by depth, and the depth reached."""
    with _one_line_errors(), obj.client.engine.connect() as conn:
        from scrapefleet.common.reads.crawl_figures import read_crawl

        shown = read_crawl(conn, crawl_id)
    if as_json:
        echo(json.dumps(shown, default=str))
    else:
        for line in render_crawl(shown):
            echo(line)
