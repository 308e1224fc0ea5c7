"""What the tests share: running the CLI (cli), reading the database file (sql),
real servers (receiver, redis_server), broker helpers (brokers), signing, waits."""
