"""The PostgreSQL backend: PostgresStore (store.py), its connections' pool (pool.py), its
migrations (migrations.py), its statements and rows (statements.py), its driver's errors
(errors.py) and its statements' texts (queries.postgres.sql). Only these modules import psycopg."""
