"""The SQLite backend: SQLiteStore on one file (store.py), its writes (group_commit.py), its
checkpoints (checkpoints.py), its migrations (migrations.py), its driver's errors (errors.py) and
its statements' texts where PostgreSQL's differ (queries.sql; the others: ../shared.sql). Only these modules import sqlite3 and aiosqlite."""
