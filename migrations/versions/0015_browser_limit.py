"""hosts.browser_limit / browser_limit_reason: how many browser jobs a host takes at once now.

A consumer short of CPU or memory, or whose Grid answers late, takes fewer browser jobs than its
capacity (consumer.browser.supervisor.load_rules) and says so in its status document; the producer
stores what it reads here at each probe, and ``host_load`` shows it to an operator: the limit, and
one line saying why it is below the capacity (NULL when it is not, or from a consumer that predates
it).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""

import importlib

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_BROWSER = importlib.import_module("scrapefleet.migrations.versions.0005_browser_capability")
HOST_LOAD_0005 = (
    _BROWSER.HOST_LOAD_0003 + ", h.browser_state AS browser, h.browser_reason, h.browser_retry_at"
)


def upgrade() -> None:
    op.add_column("hosts", sa.Column("browser_limit", sa.Integer))
    op.add_column("hosts", sa.Column("browser_limit_reason", sa.Text))
    # New columns go last: CREATE OR REPLACE VIEW may only append.
    op.execute(
        "CREATE OR REPLACE VIEW host_load AS"
        + HOST_LOAD_0005
        + ", h.browser_limit, h.browser_limit_reason"
        + _BROWSER.HOST_LOAD_FROM
    )


def downgrade() -> None:
    op.execute("DROP VIEW host_load")
    op.execute("CREATE VIEW host_load AS" + HOST_LOAD_0005 + _BROWSER.HOST_LOAD_FROM)
    op.drop_column("hosts", "browser_limit_reason")
    op.drop_column("hosts", "browser_limit")
