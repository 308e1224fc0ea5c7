"""`source` and `rule`: the webhook receivers, the schedules and the routing rules."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import click

from ..core import routing, rules, schedules, sources, webhook_config
from ..core.errors import SwitchboardError
from ..core.sources import Source
from ..core.todo_model import DEFAULT_MAX_ATTEMPTS, MAX_ATTEMPTS_CAP
from . import schedules as cli_schedules
from .common import ID, INT, Duration, IntRange, JsonValue, Out, common, operator, table, warn, when

# The families `source` shows, enables and removes: webhook sources and schedules (adapters have `adapter`).
FAMILIES = ("webhook", schedules.FAMILY)


def _secret_options(fn: Any) -> Any:
    fn = click.option("--secret", "secret_value", default=None, help="The secret itself (kept in the owner-only database).")(fn)
    fn = click.option("--secret-file", default=None, type=click.Path(dir_okay=False), help="Read the secret from this file at each delivery.")(fn)
    fn = click.option("--secret-env", default=None, metavar="VAR", help="Read the secret from this environment variable of `serve`.")(fn)
    return fn


def _ref(out: Out, secret_env: str | None, secret_file: str | None, secret_value: str | None) -> dict[str, str]:
    try:
        ref = sources.secret_ref(env=secret_env, file=secret_file, value=secret_value)
    except SwitchboardError as exc:
        out.fail(exc)
    if "file" in ref:
        ref["file"] = str(Path(ref["file"]).expanduser().resolve())
    return ref


def _warn_unreadable(name: str, ref: dict[str, str]) -> None:
    """Say so when this shell cannot read the secret: the row is kept (serve may
    run with other variables or rights), but a delivery would be answered 503."""
    if "env" in ref and not os.environ.get(ref["env"]):
        warn(f"${ref['env']} is not set here: start serve with it set, "
             f"or deliveries to {name!r} are answered 503")  # fmt: skip
    elif "file" in ref:
        problem = _file_problem(ref["file"])
        if problem:
            warn(f"{ref['file']}: {problem}: serve reads it at each delivery, "
                 f"and answers 503 to deliveries to {name!r} until it can")  # fmt: skip


def _file_problem(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return exc.strerror or "cannot be read"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not a regular file"
        if not os.read(fd, 4096).strip():
            return "empty"
    except OSError as exc:
        return exc.strerror or "cannot be read"
    finally:
        os.close(fd)
    return None


def _source_text(s: Source) -> str:
    lines = [
        f"source {s.name}: {s.kind} ({'enabled' if s.enabled else 'disabled'})",
        f"  receives at  POST /hooks/{s.name}",
        f"  queue        {s.config.get('queue') or s.name} (when no rule matches)",
        f"  trust        {s.trust_mode}" + ("  (events are labelled unverified)" if s.kind == "open" else ""),
        f"  secrets      {', '.join(sources.mask_secret(r) for r in s.secrets) or '-'}",
        f"  tolerance    {s.config.get('tolerance')} s",
        f"  max body     {s.config.get('max_body')} bytes",
        f"  replay window {_window(webhook_config.replay_window(s))}",
    ]
    for key in ("header", "algorithm", "encoding", "prefix", "id_header", "type_header"):
        if s.config.get(key):
            lines.append(f"  {key:<12} {s.config[key]}")
    kept = ", ".join(sorted(webhook_config.kept_headers(s)))
    lines.append("  redacted     headers whose name says secret" + (f" (kept in clear: {kept})" if kept else ""))
    lines.append(f"  created      {when(s.created_at)}")
    return "\n".join(lines)


def _window(seconds: int) -> str:
    if not seconds:
        return "off"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def register(main: click.Group) -> None:
    main.add_command(source)
    main.add_command(rule)
    cli_schedules.register(main)


@click.group()
def source() -> None:
    """Webhook sources (where deliveries come from and how they are verified) and schedules."""


@source.command("add")
@click.argument("name", help="The source's name: 1-64 letters, digits, '.', '_' or '-'.")
@click.option("--kind", required=True, type=click.Choice((*webhook_config.KINDS, schedules.KIND)),
              help="Signature scheme; or schedule (ticks of --cron).")  # fmt: skip
@_secret_options
@click.option("--queue", default=None, help="Queue for events no rule matches (default: the source name).")
@click.option("--tolerance", type=IntRange(min=1), default=None, help="Timestamp window, seconds (default 300).")
@click.option("--max-body", type=IntRange(min=1), default=None, help="Body cap, bytes (default 5 MiB).")
@click.option("--replay-window", type=Duration(), default=None,
              help="The same verified type and body again within it is a duplicate (default 24h for github, gitea, "
                   "gitlab, hmac and token; 0 turns it off).")  # fmt: skip
@click.option("--header", default=None, help="hmac: the signature header; token: the token header (default Authorization).")
@click.option("--algorithm", type=click.Choice(webhook_config.ALGORITHMS), default=None, help="hmac: digest (default sha256).")
@click.option("--encoding", type=click.Choice(webhook_config.ENCODINGS), default=None, help="hmac: signature encoding (default hex).")
@click.option("--prefix", default=None, help="hmac: text before the signature, e.g. 'sha256='.")
@click.option("--id-header", default=None, help="hmac/token/open: header holding the delivery id.")
@click.option("--type-header", default=None, help="hmac/token/open: header holding the event type.")
@click.option("--keep-header", "keep_headers", multiple=True, metavar="NAME",
              help="Store this header in clear though its name says secret (Idempotency-Key, say).")  # fmt: skip
@cli_schedules.options
@common
def source_add(
    db: Path | None, as_json: bool | None, name: str, kind: str, secret_env: str | None, secret_file: str | None,
    secret_value: str | None, **options: Any,
) -> None:  # fmt: skip
    """Add a webhook source NAME, received at POST /hooks/NAME; or, with --kind schedule, a schedule NAME
    whose ticks (events of type tick) the ingest leader fires."""
    out = Out(db, as_json)
    timing = {k: options.pop(k) for k in cli_schedules.OPTIONS}
    if kind == schedules.KIND:
        _refuse_given("a schedule", {"--secret-env": secret_env, "--secret-file": secret_file,
                                     "--secret": secret_value, **_flags(options, keep="queue")})  # fmt: skip
        cli_schedules.add(out, name, options.get("queue"), timing)
        return
    _refuse_given("a webhook source", _flags(timing))
    try:
        if options.get("queue") is not None:
            sources.require_queue("--queue", options["queue"])
        config = webhook_config.source_config(kind, options)
        if webhook_config.needs_secret(kind):
            secrets = [_ref(out, secret_env, secret_file, secret_value)]
        elif secret_env or secret_file or secret_value:
            raise click.UsageError("kind open takes no secret")
        else:
            secrets = []
    except SwitchboardError as exc:
        out.fail(exc)
    trust = kind
    added = out.run(
        lambda store: sources.add(store, name, family="webhook", kind=kind, trust_mode=trust, config=config, secrets=secrets,
                              by=operator())
    )
    for ref in secrets:
        _warn_unreadable(name, ref)
    out.emit(added.to_dict(), _source_text(added))


def _flags(options: dict[str, Any], keep: str | None = None) -> dict[str, Any]:
    return {"--" + k.replace("_", "-"): v for k, v in options.items() if k != keep}


def _refuse_given(what: str, given: dict[str, Any]) -> None:
    """An option of the other kind of source is refused, naming it, before anything is written."""
    for flag, value in given.items():
        if value is not None and value != ():
            raise click.UsageError(f"{flag} does not apply to {what}")


@source.command("list")
@common
def source_list(db: Path | None, as_json: bool | None) -> None:
    """List webhook sources and schedules."""
    out = Out(db, as_json)
    found = out.run(lambda store: sources.list_sources(store))
    found = [s for s in found if s.family in FAMILIES]
    rows = [[s.name, s.kind, "enabled" if s.enabled else "disabled", s.config.get("queue") or s.name] for s in found]
    out.emit([s.to_dict() for s in found], table(["NAME", "KIND", "STATE", "QUEUE"], rows) if rows else "no sources")


@source.command("show")
@click.argument("name", help="The source's name.")
@common
def source_show(db: Path | None, as_json: bool | None, name: str) -> None:
    """Show a source (secrets masked); a schedule with its last tick and its next due instants."""
    out = Out(db, as_json)
    found, now = out.run(lambda store: _with_now(store, sources.get(store, name, family=FAMILIES)))
    if found.family == schedules.FAMILY:
        out.emit(*cli_schedules.shown(found, now))
    else:
        out.emit(found.to_dict(), _source_text(found))


async def _with_now(store: Any, found: Any) -> tuple[Source, int]:
    return await found, store.clock.now_ms()


@source.command("remove")
@click.argument("name", help="The source's name.")
@common
def source_remove(db: Path | None, as_json: bool | None, name: str) -> None:
    """Remove a source and its rules (its stored events stay)."""
    out = Out(db, as_json)
    out.run(lambda store: sources.remove(store, name, family=FAMILIES, by=operator()))
    out.emit({"removed": name}, f"removed source {name}")


def _toggle(enabled: bool) -> Any:
    @click.argument("name", help="The source's name.")
    @common
    def command(db: Path | None, as_json: bool | None, name: str) -> None:
        out = Out(db, as_json)
        changed = out.run(lambda store: sources.set_enabled(store, name, enabled, family=FAMILIES, by=operator()))
        out.emit(changed.to_dict(), f"source {name} {'enabled' if enabled else 'disabled'}")

    return command


source.command("enable", help="Accept deliveries again; a schedule fires again (from now: what was due meanwhile "
                              "is not caught up).")(_toggle(True))  # fmt: skip
source.command("disable", help="Answer 404 to deliveries (the provider keeps them); a schedule stops firing.")(
    _toggle(False))  # fmt: skip


@source.command("rotate")
@click.argument("name", help="The source's name.")
@_secret_options
@common
def source_rotate(
    db: Path | None, as_json: bool | None, name: str, secret_env: str | None, secret_file: str | None, secret_value: str | None
) -> None:
    """Add a second active secret; both verify until `retire-secret`."""
    out = Out(db, as_json)
    ref = _ref(out, secret_env, secret_file, secret_value)
    changed = out.run(lambda store: sources.rotate_secret(store, name, ref, by=operator()))
    _warn_unreadable(name, ref)
    out.emit(changed.to_dict(), f"source {name} now verifies with {len(changed.secrets)} secrets")


@source.command("retire-secret")
@click.argument("name", help="The source's name.")
@common
def source_retire(db: Path | None, as_json: bool | None, name: str) -> None:
    """Drop the older secret after a rotation."""
    out = Out(db, as_json)
    changed = out.run(lambda store: sources.retire_secret(store, name, by=operator()))
    out.emit(changed.to_dict(), f"source {name} now verifies with its newest secret only")


# ---------------------------------------------------------------- rules


@click.group()
def rule() -> None:
    """Routing rules: which todos an event makes."""


def _rules_text(found: list[rules.Rule]) -> str:
    if not found:
        return "no rules (each source's events go to its default queue)"
    rows = []
    for r in found:
        flags = [flag for flag, on in (("after earlier", r.chain), ("stop", r.stop)) if on]
        then = "drop" if r.action == "drop" else f"-> {r.queue}" + (f" ({', '.join(flags)})" if flags else "")
        extra = []
        if r.assignee:
            extra.append(f"assignee={r.assignee}")
        if r.priority:
            extra.append(f"priority={r.priority}")
        if r.title:
            extra.append(f"title={r.title!r}")
        rows.append([r.position, r.id, r.source, r.type or "*", " ".join(str(c) for c in r.conditions) or "-", then, " ".join(extra)])
    return table(["POS", "ID", "SOURCE", "TYPE", "WHERE", "THEN", ""], rows)


@rule.command("add")
@click.option("--source", required=True, help="The source whose events this rule sees.")
@click.option("--type", "type_", default=None, help="Event type (a glob: 'pull_request*').")
@click.option("--where", multiple=True, help="PATH=VALUE, PATH=A|B, 'PATH~GLOB' or 'PATH?' (repeatable; all must hold).")
@click.option("--queue", default=None, help="Queue of the todo this rule makes.")
@click.option("--drop", is_flag=True, help="Make no todo and stop routing.")
@click.option("--title", default=None, help="Title template: {dotted.path} from the payload; {@source} {@type} {@id}.")
@click.option("--assignee", default=None, help="Only this owner may claim the todo.")
@click.option("--priority", type=INT, default=0, show_default=True, help="Higher is claimed first.")
@click.option(
    "--max-attempts",
    type=IntRange(1, MAX_ATTEMPTS_CAP),
    default=DEFAULT_MAX_ATTEMPTS,
    show_default=True,
    help=f"The todo's attempts before it becomes a dead letter (1-{MAX_ATTEMPTS_CAP}).",
)
@click.option("--stop", is_flag=True, help="When this rule matches, no later rule is tried.")
@click.option(
    "--chain",
    is_flag=True,
    help="The todo waits for the todos the event's earlier rules made: it is blocked until they are done.",
)
@common
def rule_add(db: Path | None, as_json: bool | None, type_: str | None, where: tuple[str, ...], **fields: Any) -> None:
    """Append a rule. Every matching rule adds a todo, until --stop or --drop."""
    out = Out(db, as_json)
    added = out.run(lambda store: rules.add(store, type=type_, where=list(where), by=operator(), **fields))
    out.emit(added.to_dict(), f"added rule {added.id} at position {added.position}\n" + _rules_text([added]))


@rule.command("list")
@click.option("--source", default=None, help="Only this source's rules.")
@common
def rule_list(db: Path | None, as_json: bool | None, source: str | None) -> None:
    """List rules in the order they are tried."""
    out = Out(db, as_json)
    found = out.run(lambda store: rules.list_rules(store, source=source))
    out.emit([r.to_dict() for r in found], _rules_text(found))


@rule.command("remove")
@click.argument("rule_id", metavar="ID", type=ID, help="The rule's id (rule list shows it).")
@common
def rule_remove(db: Path | None, as_json: bool | None, rule_id: int) -> None:
    """Remove a rule."""
    out = Out(db, as_json)
    out.run(lambda store: rules.remove(store, rule_id, by=operator()))
    out.emit({"removed": rule_id}, f"removed rule {rule_id}")


@rule.command("move")
@click.argument("rule_id", metavar="ID", type=ID, help="The rule's id (rule list shows it).")
@click.option("--to", "to", type=INT, required=True, help="The 1-based position it takes.")
@common
def rule_move(db: Path | None, as_json: bool | None, rule_id: int, to: int) -> None:
    """Move a rule to another position."""
    out = Out(db, as_json)
    found = out.run(lambda store: rules.move(store, rule_id, to, by=operator()))
    out.emit([r.to_dict() for r in found], _rules_text(found))


@rule.command("test")
@click.option("--event", "event_id", type=ID, default=None, help="A stored event.")
@click.option("--source", default=None, help="With --payload: the source it would come from.")
@click.option("--type", "type_", default="webhook", show_default=True, help="With --payload: the event type.")
@click.option("--payload", type=JsonValue(), default=None, help="JSON, @FILE or @-.")
@common
def rule_test(
    db: Path | None, as_json: bool | None, event_id: int | None, source: str | None, type_: str, payload: Any
) -> None:
    """Show the todos an event or a payload would make. Writes nothing."""
    out = Out(db, as_json)
    if (event_id is None) == (source is None):
        raise click.UsageError("give --event ID, or --source S with --payload")
    if source is not None and payload is None:
        raise click.UsageError("--source needs --payload")
    planned = out.run(
        lambda store: routing.dry_run(store, event_id=event_id, source=source, type=type_, payload=payload)
    )
    shown = [
        {"queue": t.queue, "title": t.title, "kind": t.kind, "assignee": t.assignee, "priority": t.priority,
         "max_attempts": t.max_attempts, "idempotency_key": t.idempotency_key, "after_keys": list(t.after_keys)}
        for t in planned
    ]  # fmt: skip
    number = {t.idempotency_key: n for n, t in enumerate(planned, start=1)}
    rows = [
        [n, t["queue"], t["priority"], t["assignee"] or "-", _waits(t["after_keys"], number), t["title"]]
        for n, t in enumerate(shown, start=1)
    ]
    heading = ["#", "QUEUE", "PRIORITY", "ASSIGNEE", "AFTER", "TITLE"]
    out.emit(shown, table(heading, rows) if rows else "no todos (dropped)")


def _waits(keys: list[str], number: dict[str | None, int]) -> str:
    """A chain's todo's dependencies, as the numbers of the rows that made them."""
    return ",".join(f"#{number[key]}" for key in keys) or "-"
