"""The PostgreSQL backend: PostgresStore (store.py), its connections' pool (pool.py), its
migrations (migrations.py), its statements and rows (statements.py), its driver's errors
(errors.py) and its statements' texts where SQLite's differ (queries.postgres.sql; the others:
../shared.sql). Only these modules import psycopg."""
