"""``GET /metrics``: Prometheus' text format, read from the store at scrape time.

One registry per app (never the library's global one: two servers in one
process, as the tests run them, must not share or collide), holding one
collector. A scrape reads the store first (asynchronously, on the read
connections), hands the families to the collector, then renders: no await
between the two, so concurrent scrapes never mix.

    switchboard_todos{queue,state}                   gauge: ready, delayed, claimed, done, dead, cancelled
    switchboard_queue_oldest_ready_age_seconds{queue} gauge (absent: nothing ready)
    switchboard_queue_paused{queue}                  gauge: 1 paused, 0 not
    switchboard_queue_max_claimed{queue}             gauge: a queue's limit (absent: none); claimed now is switchboard_todos
    switchboard_queue_max_per_minute{queue}          gauge: a queue's rate limit (absent: none)
    switchboard_queue_claims_last_minute{queue}      gauge: claims in the last minute (queues with a rate limit)
    switchboard_dead_letters{queue}                  gauge
    switchboard_deliveries_total{source,outcome}     counter since this process started (core/tally.py):
                                                     stored, duplicate, unverified (401), too_large (413), failed (503)
    switchboard_source_events{source}                gauge: events kept (pruning lowers it)
    switchboard_adapter_consecutive_failures{adapter} gauge
    switchboard_adapter_lag_messages{adapter}        gauge: not read yet (asked of its broker now)
    switchboard_adapter_unacked_messages{adapter}    gauge: read, not acknowledged
    switchboard_claim_latency_seconds                histogram: claim_next, call to committed answer
    switchboard_commit_latency_seconds               histogram: one write transaction, BEGIN to COMMIT done
    switchboard_group_commit_size                    histogram: writes per committed transaction
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..core import browse
from ..core.adapters import PROBE_TIMEOUT
from ..core.todos import stats
from .api import answers_errors
from .context import Context

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STATES = ("ready", "delayed", "claimed", "done", "dead", "cancelled")
HISTOGRAMS = {
    "claim_seconds": ("switchboard_claim_latency_seconds", "claim_next: from the call to its committed answer"),
    "commit_seconds": ("switchboard_commit_latency_seconds", "one write transaction, from BEGIN to COMMIT done"),
    "group_commit_size": ("switchboard_group_commit_size", "writes (callers) per committed transaction"),
}


class _Scraped:
    """The collector: yields the families the last scrape read."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def collect(self) -> Iterator[Metric]:
        yield from self.families


async def families(ctx: Context) -> list[Metric]:
    store = ctx.store
    out: list[Metric] = []

    todos = GaugeMetricFamily("switchboard_todos", "todos by queue and state (dead: dead letters)", labels=["queue", "state"])
    oldest = GaugeMetricFamily("switchboard_queue_oldest_ready_age_seconds", "age of the oldest ready todo", labels=["queue"])
    paused = GaugeMetricFamily("switchboard_queue_paused", "1 while an operator paused the queue", labels=["queue"])
    dead = GaugeMetricFamily("switchboard_dead_letters", "dead letters (failed for good) by queue", labels=["queue"])
    max_claimed = GaugeMetricFamily("switchboard_queue_max_claimed", "at most this many claimed at once (queue limit)",
                                    labels=["queue"])  # fmt: skip
    max_per_minute = GaugeMetricFamily("switchboard_queue_max_per_minute",
                                       "at most this many claims in any 60 s (queue limit)", labels=["queue"])  # fmt: skip
    last_minute = GaugeMetricFamily("switchboard_queue_claims_last_minute", "claims in the last minute, of a queue "
                                    "with a rate limit", labels=["queue"])  # fmt: skip
    for s in await stats(store):
        for state in STATES:
            todos.add_metric([s.queue, state], getattr(s, state))
        if s.oldest_ready_age_seconds is not None:
            oldest.add_metric([s.queue], s.oldest_ready_age_seconds)
        paused.add_metric([s.queue], 1 if s.paused else 0)
        dead.add_metric([s.queue], s.dead)
        if s.max_claimed is not None:
            max_claimed.add_metric([s.queue], s.max_claimed)
        if s.max_per_minute is not None:
            max_per_minute.add_metric([s.queue], s.max_per_minute)
            last_minute.add_metric([s.queue], s.claims_last_minute or 0)
    out += [todos, oldest, paused, dead, max_claimed, max_per_minute, last_minute]

    deliveries = CounterMetricFamily(
        "switchboard_deliveries", "webhook deliveries answered by this process, by source and outcome",
        labels=["source", "outcome"],
    )  # fmt: skip
    for (source, outcome), n in sorted(store.tally.deliveries().items()):
        deliveries.add_metric([source, outcome], n)
    kept = GaugeMetricFamily("switchboard_source_events", "events kept per source", labels=["source"])
    views = await browse.sources(store)
    for view in views:
        kept.add_metric([view.source.name], view.events)
    out += [deliveries, kept]

    failures = GaugeMetricFamily("switchboard_adapter_consecutive_failures", "failed polls in a row", labels=["adapter"])
    lag = GaugeMetricFamily("switchboard_adapter_lag_messages", "messages not read yet", labels=["adapter"])
    unacked = GaugeMetricFamily("switchboard_adapter_unacked_messages", "read, not acknowledged", labels=["adapter"])
    adapters = [v.source for v in views if v.source.family == "queue"]
    lags = await asyncio.gather(*(ctx.lag(a, PROBE_TIMEOUT) for a in adapters))
    for adapter, found in zip(adapters, lags, strict=True):
        failures.add_metric([adapter.name], adapter.consecutive_failures)
        if found["waiting"] is not None:
            lag.add_metric([adapter.name], found["waiting"])
        if found["unacked"] is not None:
            unacked.add_metric([adapter.name], found["unacked"])
    out += [failures, lag, unacked]

    for key, (buckets, total, _count) in store.tally.histograms().items():
        name, documentation = HISTOGRAMS[key]
        family = HistogramMetricFamily(name, documentation)
        family.add_metric([], [(_le(bound), n) for bound, n in buckets], sum_value=total)
        out.append(family)
    return out


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def routes(ctx: Context) -> list[BaseRoute]:
    registry = CollectorRegistry(auto_describe=False)
    scraped = _Scraped()
    registry.register(scraped)  # type: ignore[arg-type]

    async def metrics(request: Request) -> Response:
        found = await families(ctx)
        scraped.families = found  # then render at once: no await between, so scrapes never mix
        body: Any = generate_latest(registry)
        return Response(body, media_type=CONTENT_TYPE)

    return [Route("/metrics", answers_errors(metrics), methods=["GET"])]
