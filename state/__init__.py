"""Data of workmem: messages, the working-memory document, op contract, files and SQLite index.

Free of LangChain imports so the store stays cheap to import in subprocesses.
"""
