"""The checks every broker's ``configure`` shares: the options the CLI gives each broker
(--url or --url-env, --batch, --queue), and the plain checks of a broker's own options.

A broker's ``configure`` starts from ``shared(options, ...)`` and adds its own keys.
No message quotes a URL: it may hold a password.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import SplitResult, urlsplit

from ..core.adapters import Option
from ..core.errors import InvalidArgument
from ..core.sources import require_queue
from ..core.text import first_control

DEFAULT_BATCH = 64
MAX_BATCH = 10_000
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def shared(options: Mapping[str, Any], *, takes_url: bool = True, default_batch: int = DEFAULT_BATCH,
           max_batch: int = MAX_BATCH) -> dict[str, Any]:  # fmt: skip
    """The shared keys of a config: ``url`` or ``url_env`` (exactly one when the broker takes a
    URL; neither when it does not), ``batch`` (default ``default_batch``) and ``queue`` when given.

    The URL's form is the broker's to check (``configure`` does, after this).
    """
    url, env = options.get("url"), options.get("url_env")
    config: dict[str, Any] = {}
    if takes_url:
        if (url is None) == (env is None):
            raise InvalidArgument("give exactly one of --url and --url-env")
        if url is not None:
            if not isinstance(url, str) or not url:
                raise InvalidArgument("--url must not be empty")
            config["url"] = url
        else:
            config["url_env"] = env_name("--url-env", env)
    elif url is not None or env is not None:
        raise InvalidArgument("--url and --url-env do not apply to this broker")
    batch = options.get("batch")
    if batch is None:
        batch = default_batch
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= max_batch:
        raise InvalidArgument(f"--batch must be a whole number from 1 to {max_batch}")
    config["batch"] = batch
    if options.get("queue") is not None:
        require_queue("--queue", options["queue"])
        config["queue"] = options["queue"]
    return config


def env_name(flag: str, value: Any) -> str:
    """An environment variable's name (letters, digits and '_', not starting with a digit)."""
    if not isinstance(value, str) or not ENV_NAME.fullmatch(value):
        raise InvalidArgument(f"{flag} must name an environment variable (letters, digits and '_')")
    return value


def text(option: Option, value: Any) -> str | None:
    """A text option: None when not given (or refused when required), else one plain line."""
    if value is None or value == "":
        if option.required:
            raise InvalidArgument(f"{option.flag} is required")
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"{option.flag} must be text")
    if (found := first_control(value)) is not None:
        raise InvalidArgument(f"{option.flag} holds a control character ({found})")
    if option.choices is not None and value not in option.choices:
        raise InvalidArgument(f"{option.flag} must be one of {', '.join(option.choices)}")
    return value


def number(option: Option, value: Any) -> int | float | None:
    """A number option: None when not given (or refused when required), else within its range."""
    if value is None:
        if option.required:
            raise InvalidArgument(f"{option.flag} is required")
        return None
    kind = int if option.type is int else float
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise InvalidArgument(f"{option.flag} must be a {'whole ' if kind is int else ''}number")
    below = option.min is not None and value < option.min
    if math.isnan(value) or below or (option.max is not None and value > option.max):
        low = "" if option.min is None else f" from {option.min:g}"
        high = "" if option.max is None else f" to {option.max:g}"
        raise InvalidArgument(f"{option.flag} must be a number{low}{high}")
    return value


def flag(option: Option, value: Any) -> bool:
    """A flag option (type bool): given (True) or not (None or False)."""
    if value is not None and not isinstance(value, bool):
        raise InvalidArgument(f"{option.flag} is a flag: it takes no value")
    return bool(value)


def url_parts(url: str, schemes: tuple[str, ...], form: str, flag: str = "--url") -> SplitResult:
    """A broker URL's parts, refused naming what is wrong: spaces or control characters, another scheme,
    a port that is no number from 1 to 65535, no host. ``form`` is the URL's shape, shown in the refusal."""
    if first_control(url) is not None or " " in url:
        raise InvalidArgument(f"{flag} must not hold spaces or control characters (percent-encode them)")
    if url.split("://", 1)[0].lower() not in schemes or "://" not in url:
        raise InvalidArgument(f"{flag} must start with {' or '.join(f'{s}://' for s in schemes)}")
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is no number or out of range, a broken [IPv6] literal
        raise InvalidArgument(f"{flag}: the port must be a number from 1 to 65535, and an IPv6 host in [ ] ({form})") from None
    if not host:
        raise InvalidArgument(f"{flag}: no host ({form})")
    if port == 0:
        raise InvalidArgument(f"{flag}: the port must be a number from 1 to 65535")
    return parts
