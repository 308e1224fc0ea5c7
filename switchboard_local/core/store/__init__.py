"""The store: one door in, two backends behind it.

interface.py  the Store and Transaction Protocols and their contract: what verbs and edges see
opener.py     open_store / inspect_store: the one module that picks a backend (by URL or path)
shared.py     what every part shares: the schema version, where a database is, its name in messages
url.py        a PostgreSQL URL read strictly, and shown with its password hidden
queries.py    the named statements: SQLite's (Q) and PostgreSQL's, under the same names
shared.sql    the statements whose text is the same on both backends (the others: each backend's folder)
sqlite/       SQLiteStore: the file, its migrations, group commit, checkpoints, its SQL
postgres/     PostgresStore: its connections' pool, migrations, statements, its SQL

Nothing here imports a backend but the opener (tests/test_layout.py checks it).
"""
