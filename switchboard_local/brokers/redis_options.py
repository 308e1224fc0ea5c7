"""What only redis-py can tell of a Redis URL: whether its connection takes the options."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

import redis.asyncio as redis

from ..core.errors import InvalidArgument
from ..core.text import first_control


def check_options(url: str) -> None:
    """Refuse what redis-py would refuse at every connect: an option its
    connection does not take, or a value it rejects (protocol=9)."""
    try:
        pool = redis.ConnectionPool.from_url(url)
        pool.connection_class(**pool.connection_kwargs)  # builds, never connects
    except TypeError as exc:
        unknown = re.search(r"keyword argument '([A-Za-z0-9_]{1,40})'", str(exc))
        what = f"{unknown.group(1)}= is" if unknown else "an option is"
        raise InvalidArgument(f"--redis-url: {what} not an option redis takes for this scheme") from None
    except (ValueError, redis.RedisError) as exc:
        secrets = [v for k, v in parse_qsl(urlsplit(url).query) if k == "password"] + [urlsplit(url).password or ""]
        reason = str(exc)
        if any(secret and secret in reason for secret in secrets) or first_control(reason) is not None:
            reason = "an option holds a value redis refuses"
        raise InvalidArgument(f"--redis-url: {reason[:200].rstrip('.')}") from None
