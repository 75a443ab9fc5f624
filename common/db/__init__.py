"""The database: engines and LISTEN, pooled and held connections, the declared schema, the
migrations' runner and the NOTIFY channels. Writes are in scrapefleet.common.store."""
