"""The declared schema, whole: every table on one MetaData (``metadata``), which Alembic
(migrations/env.py) and tests/integration/test_schema.py compare with the migrated database.

The tables are declared by domain, each group in a module that reads on its own:
common.db.job_tables (jobs, their events, archive and webhook deliveries), host_tables (hosts,
their events and access, database roles, profiles), crawl_tables, schedule_tables and
control_tables (operator switches and live controls, producers, rate keys) and
identity_tables (proxy pools, their proxies and credentials, identity leases); what they share is
common.db.schema_base's. Importing this module is what puts every one of them on ``metadata``.
"""

from __future__ import annotations

from scrapefleet.common.db import (
    control_tables,
    crawl_tables,
    host_tables,
    identity_tables,
    job_tables,
    schedule_tables,
)
from scrapefleet.common.db.schema_base import metadata

# Every group, imported for its tables: a table module not named here is not in the schema the
# migrations are held to.
TABLE_MODULES = (
    job_tables,
    host_tables,
    crawl_tables,
    schedule_tables,
    control_tables,
    identity_tables,
)

__all__ = ["TABLE_MODULES", "metadata"]
