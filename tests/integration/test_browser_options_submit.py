"""Bad browser options are refused at submit, naming the field; nothing is inserted, not even
the good jobs submitted with them."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from scrapefleet.common.api import Client
from scrapefleet.common.errors import SubmitError

pytestmark = pytest.mark.timeout(60)

URL = "https://shop.example/item/7"


def _jobs(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar_one())


@pytest.mark.parametrize(
    ("browser", "field"),
    [
        ({"user_agnt": "x"}, r"payload\.browser\.user_agnt"),
        ({"proxy": "ftp://proxy.example:21"}, r"payload\.browser\.proxy"),
        ({"cookies": [{"value": "v"}]}, r"payload\.browser\.cookies\.0\.name"),
    ],
)
def test_bad_options_insert_nothing(
    engine: Engine, database_url: str, browser: dict[str, Any], field: str
) -> None:
    with Client(database_url) as client:
        with pytest.raises(SubmitError, match=field):
            client.submit("fetch_page", {"url": URL, "browser": browser})
        with pytest.raises(SubmitError, match=field):
            next(client.map("fetch_page", [{"url": URL}, {"url": URL, "browser": browser}], 1))
    assert _jobs(engine) == 0
