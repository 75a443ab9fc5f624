"""A NOTIFY when a webhook delivery is enqueued, so the producer's sender POSTs it at once
instead of at its next interval.

The delivery rows come from the jobs_webhook_enqueue trigger, on every path that finishes a
job (a consumer's outcome, a release past its bound, a hand-written UPDATE), so the NOTIFY sits
on their table rather than beside the consumer's finish NOTIFY, which only some paths send and
which fires for every job, with a callback URL or not. One NOTIFY per inserted row: PostgreSQL
folds identical notifications of one transaction into one.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

CHANNEL_WEBHOOKS_DUE = "scrapefleet_webhooks_due"  # common.constants.CHANNEL_WEBHOOKS_DUE

NOTIFY_FUNCTION = f"""
CREATE FUNCTION webhook_deliveries_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL_WEBHOOKS_DUE}', '');
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.execute(NOTIFY_FUNCTION)
    op.execute(
        "CREATE TRIGGER webhook_deliveries_notify_insert AFTER INSERT ON webhook_deliveries"
        " FOR EACH ROW EXECUTE FUNCTION webhook_deliveries_notify()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER webhook_deliveries_notify_insert ON webhook_deliveries")
    op.execute("DROP FUNCTION webhook_deliveries_notify()")
