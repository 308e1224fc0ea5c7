"""`dashboard`: the dashboard's URL, with the install's token (and a browser opened on it, asked).

The dashboard is served by the process that runs the webhook receiver: `serve`,
or an `mcp` that leads ingest with ``http.listen`` set. The address is the
leader's receiver when one listens, else ``http.listen``, else `serve`'s
default. Opening the URL hands the browser the token (as a cookie; it leaves
the address bar at once); every page, read and action asks for it.
"""

from __future__ import annotations

import webbrowser
from pathlib import Path
from typing import Any

import click

from ..core import access_token, leadership, settings
from ..core.errors import SwitchboardError
from ..core.store.interface import Store
from .common import Out, common

DEFAULT_ADDRESS = "http://127.0.0.1:8787"  # `serve`'s default --host and --port


def register(main: click.Group) -> None:
    main.add_command(dashboard_command)


def _browsable(address: str) -> str:
    """A listen address as a browser reaches it: a wildcard bind through loopback."""
    for wildcard, loopback in (("://0.0.0.0:", "://127.0.0.1:"), ("://[::]:", "://[::1]:")):
        address = address.replace(wildcard, loopback)
    return address


async def _where(store: Store) -> dict[str, Any]:
    # "token_at": the store's local name, beside which the token lives (never shown);
    # "db": the database as output names it (a URL's password hidden).
    return {**await _address(store), "db": store.where, "token_at": store.path}


async def _address(store: Store) -> dict[str, Any]:
    leader = await leadership.current(store)
    if leader is not None and leader.http:
        return {"address": _browsable(leader.http), "serving": True, "served_by": {"pid": leader.pid, "kind": leader.kind}}
    listen = (await settings.get(store, settings.HTTP_LISTEN.name)).value
    if listen is not None:
        host, port = settings.split_address(listen)
        shown = f"[{host}]" if ":" in host else host
        return {"address": _browsable(f"http://{shown}:{port}"), "serving": False, "served_by": None}
    return {"address": DEFAULT_ADDRESS, "serving": False, "served_by": None}


@click.command("dashboard")
@click.option("--open", "open_browser", is_flag=True, help="Open the URL in a web browser too.")
@common
def dashboard_command(db: Path | None, as_json: bool | None, open_browser: bool) -> None:
    """Print the dashboard's URL with this install's token (keep it private: it lets its holder read and act)."""
    out = Out(db, as_json)
    where = out.run(_where)
    try:
        token = access_token.read_or_create(where.pop("token_at"))
    except SwitchboardError as exc:  # the token file cannot be made or read
        out.fail(exc)
    url = f"{where['address']}/?token={token}"
    note = ""
    if not where["serving"]:
        note = "\n(no process serves it now: start `switchboard-local serve`" + (
            ", or an `mcp` with http.listen set)" if where["address"] != DEFAULT_ADDRESS else ")")
    out.emit({**where, "url": url}, url + note)
    if open_browser:
        webbrowser.open(url)
