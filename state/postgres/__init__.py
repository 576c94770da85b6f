"""The PostgreSQL storage backend, for many replicas on one database."""
