"""Data of workmem: messages, the working-memory document, the op contract, the storage interface and its
backends (`files/`: files + SQLite; `postgres/`), and the search both backends share (`search/`).

Free of top-level LangChain imports so the store stays cheap to import in subprocesses.
"""
