"""The files + SQLite storage backend: one data root of append-only files, SQLite for what can be rebuilt."""
