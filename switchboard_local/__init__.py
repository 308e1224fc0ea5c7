"""switchboard-local: events in, durable todos out, drained by agents over MCP."""

__version__ = "0.1.0"
