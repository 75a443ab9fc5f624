"""``webhook_deliveries.payload_bytes``: the size of a delivery's body, known before it is read.

A delivery's payload carries the job's result, up to 8 MiB (the jobs' CHECK), and the sender
keeps up to a hundred POSTs in flight: without its size, taking a hundred due rows could hold
800 MiB in the producer before the first POST ended. The column is generated from the payload
(its JSON text's bytes, what the POST sends, give or take the key order), so no path that
writes a payload can get it wrong, and the sender takes due rows only while their sizes fit
what its memory budget has left (common.store.producing.webhook_deliveries).

Adding a stored generated column rewrites the table once: the deliveries' rows, which the
retention sweep keeps few.

Revision ID: 0041
Revises: 0040
Create Date: 2026-11-28
"""

from alembic import op

revision = "0041"
down_revision = "0040"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE webhook_deliveries ADD COLUMN payload_bytes integer"
        " GENERATED ALWAYS AS (octet_length(CAST(payload AS text))) STORED"
    )
    op.execute(
        "COMMENT ON COLUMN webhook_deliveries.payload_bytes IS"
        " 'Bytes of the payload as JSON text: what the sender holds to POST it.'"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE webhook_deliveries DROP COLUMN payload_bytes")
