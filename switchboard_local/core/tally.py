"""What this process counted since it started: deliveries by outcome, claim and commit latencies.

Kept in memory, one ``Tally`` per open store (``store.tally``), read by the
dashboard's ``/api/sources`` and ``/metrics``. Nothing here survives a
restart and nothing is written to the database (a counter row per delivery
would cost every delivery a write): what survives is what the rows say
(events kept per source, todos by state). Each process counts only its own
work: the deliveries its receiver answered, the claims and commits it made.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Sequence
from typing import Any

from .clock import rfc3339

# A webhook delivery's outcome: stored (202), duplicate (202, a redelivery),
# unverified (401), too_large (413), failed (503: nothing stored, the sender retries).
OUTCOMES = ("stored", "duplicate", "unverified", "too_large", "failed")
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Histogram:
    """Counts of observations at or below each bound (the last slot: above every bound), their sum and count."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it), +inf last: Prometheus' buckets."""
        out, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


class Tally:
    """This process's counters. The group commit observes from its thread: one lock guards them all."""

    def __init__(self, started_ms: int | None = None) -> None:
        self.started_ms = started_ms if started_ms is not None else time.time_ns() // 1_000_000
        self._lock = threading.Lock()
        self._deliveries: dict[tuple[str, str], int] = {}
        self.claim_seconds = Histogram(LATENCY_BUCKETS)
        self.commit_seconds = Histogram(LATENCY_BUCKETS)
        self.group_commit_size = Histogram(GROUP_BUCKETS)

    def delivery(self, source: str, outcome: str) -> None:
        with self._lock:
            self._deliveries[(source, outcome)] = self._deliveries.get((source, outcome), 0) + 1

    def deliveries(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._deliveries)

    def deliveries_of(self, source: str) -> dict[str, int]:
        with self._lock:
            return {outcome: self._deliveries.get((source, outcome), 0) for outcome in OUTCOMES}

    def claimed(self, seconds: float) -> None:
        with self._lock:
            self.claim_seconds.observe(seconds)

    def committed(self, seconds: float, writes: int) -> None:
        """One COMMIT that took ``seconds`` (BEGIN to COMMIT done) and held ``writes`` callers' work."""
        with self._lock:
            self.commit_seconds.observe(seconds)
            self.group_commit_size.observe(writes)

    def histograms(self) -> dict[str, tuple[list[tuple[float, int]], float, int]]:
        with self._lock:
            return {
                name: (h.cumulative(), h.sum, h.count)
                for name, h in (
                    ("claim_seconds", self.claim_seconds),
                    ("commit_seconds", self.commit_seconds),
                    ("group_commit_size", self.group_commit_size),
                )
            }

    def since_rfc3339(self) -> Any:
        return rfc3339(self.started_ms)
