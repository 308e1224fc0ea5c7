"""`--help`: every option and argument a user types says what it is, and a
listing of commands shows each command's first sentence whole.

The rule for a listing: a command's line is the first sentence of its help
(to the first '.', '!' or '?' before a space), never cut; a long one wraps
onto the next lines at a space, so no line of it ends inside a word.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest

from switchboard_local.cli.common import first_sentence
from switchboard_local.cli.main import main

from support.cli import invoke

# `service install -- SERVE OPTIONS`: cli/service.py is another change's file (the newcomer's path);
# its one argument without help is left to it.


def commands(group: click.Group = main, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, group
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def groups() -> list[tuple[str, ...]]:
    return [path for path, command in commands() if isinstance(command, click.Group)]


def test_every_option_and_argument_a_user_types_has_help() -> None:
    typed = [(path, p) for path, command in commands() for p in command.params if not getattr(p, "hidden", False)]
    missing = [
        f"{' '.join(path) or 'switchboard-local'}: {param.human_readable_name}"
        for path, param in typed
        if not (param.help or "").strip()
    ]
    assert missing == []


def test_the_serve_prune_options_say_what_they_keep() -> None:
    shown = " ".join(invoke(None, "serve", "--help").out.split())
    assert "--prune-older-than FLOAT RANGE Days: the hourly prune deletes finished todos and events" in shown
    assert "--prune-max-events INTEGER RANGE The hourly prune keeps at most this many of the newest events" in shown


def listing(path: tuple[str, ...]) -> dict[str, str]:
    """The Commands section of ``path --help``: each command's name and its text, wrapped lines joined."""
    result = invoke(None, *path, "--help")
    assert result.code == 0, result.err
    section = result.out.split("\nCommands:\n", 1)[1]
    rows: dict[str, str] = {}
    name = ""
    for line in section.splitlines():
        found = re.match(r"^  (\S+)\s+(.*)$", line)
        if found:
            name = found.group(1)
            rows[name] = found.group(2)
        elif line.strip():
            rows[name] += " " + line.strip()
    return rows


@pytest.mark.parametrize("path", groups(), ids=lambda path: " ".join(path) or "switchboard-local")
def test_a_listing_shows_each_commands_first_sentence_whole(path: tuple[str, ...]) -> None:
    group = main
    for name in path:
        group = group.commands[name]
    shown = listing(path)
    assert set(shown) == {name for name, command in group.commands.items() if not command.hidden}
    for name, text in shown.items():
        assert text == first_sentence(group.commands[name].help), name
        assert "..." not in text and text.endswith((".", "!", "?")), name


def test_the_top_level_listing_is_not_cut_mid_word() -> None:
    shown = listing(())
    assert shown["db"] == "The database: where it is, and copying it into another."
    assert shown["dashboard"].endswith("(keep it private: it lets its holder read and act).")
    assert shown["agent"] == "Agent profiles: the queues an MCP server may drain and the tools it offers."


@pytest.mark.parametrize(
    ("text", "sentence"),
    [("Append a rule. Every matching rule adds a todo.", "Append a rule."),
     ("Show one event: its headers (redacted).\n\n    More.", "Show one event: its headers (redacted)."),
     ("Reset the lease to now + LEASE (capped at 12 h\n    per attempt).", "Reset the lease to now + LEASE (capped at 12 h per attempt)."),
     ("Set NAME to VALUE (sizes: 512KiB, 2MiB…; e.g.x)", "Set NAME to VALUE (sizes: 512KiB, 2MiB…; e.g.x)")],
)  # fmt: skip
def test_a_first_sentence_ends_at_its_first_stop_before_a_space(text: str, sentence: str) -> None:
    assert first_sentence(text) == sentence
