"""The LoCoMo-format evaluation: ingest, commit, measure (`workmem eval`)."""
