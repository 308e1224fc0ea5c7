"""`config`: the settings every process on the database shares."""

from __future__ import annotations

from pathlib import Path

import click

from ..core import settings
from .common import Out, common, operator, table


def register(main: click.Group) -> None:
    main.add_command(config_group)


@click.group("config")
def config_group() -> None:
    """Settings stored in the database, shared by every process on it."""


def _text(value: settings.Value) -> str:
    note = " (default)" if value.is_default else f" (default {value.setting.show(value.setting.default)})"
    return f"{value.setting.name} = {value.setting.show(value.value)}{note}"


@config_group.command("list")
@common
def config_list(db: Path | None, as_json: bool | None) -> None:
    """Every setting, its value and what it does."""
    out = Out(db, as_json)
    found = out.run(settings.get_all)
    rows = [[v.setting.name, v.setting.show(v.value) + ("" if v.is_default else " (set)"), v.setting.help]
            for v in found]  # fmt: skip
    out.emit([v.to_dict() for v in found], table(["NAME", "VALUE", "WHAT"], rows))


@config_group.command("get")
@click.argument("name", help="The setting (config list shows them all).")
@common
def config_get(db: Path | None, as_json: bool | None, name: str) -> None:
    """One setting's value."""
    out = Out(db, as_json)
    value = out.run(lambda store: settings.get(store, name))
    out.emit(value.to_dict(), _text(value))


@config_group.command("set")
@click.argument("name", help="The setting (config list shows them all).")
@click.argument("value", help="Its new value.")
@common
def config_set(db: Path | None, as_json: bool | None, name: str, value: str) -> None:
    """Set NAME to VALUE (sizes: bytes, or 512KiB, 2MiB…; addresses: HOST:PORT); running processes use it soon."""
    out = Out(db, as_json)
    changed = out.run(lambda store: settings.set_value(store, name, value, by=operator()))
    out.emit(changed.to_dict(), _text(changed))


@config_group.command("unset")
@click.argument("name", help="The setting (config list shows them all).")
@common
def config_unset(db: Path | None, as_json: bool | None, name: str) -> None:
    """Back to the default."""
    out = Out(db, as_json)
    changed = out.run(lambda store: settings.unset(store, name, by=operator()))
    out.emit(changed.to_dict(), _text(changed))
