"""The fleet's state as the database tells it, computed at each scrape: what waits for a worker,
what the housekeeper has yet to deliver, and which nodes stopped reporting. Every registry replica
reports the same values (alert on max(), not sum()). Labels are bounded: base models and pools are
few, and states fixed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session

from registry.ops import repository
from registry.clock import aware
from registry.settings import get_settings

DELIVERY_STATES = ("pending", "delivered", "failed")


def exposition(session: Session) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_FleetCollector(session))
    return generate_latest(registry)


class _FleetCollector(Collector):
    def __init__(self, session: Session) -> None:
        self.session = session

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = datetime.now(UTC)
        yield from _evaluations(repository.evaluations_waiting(self.session), now)
        yield from _deliveries(repository.webhook_deliveries_by_state(self.session), now)
        settings = get_settings()
        yield _nodes(repository.node_reports(self.session), now, settings.node_stale_after_s,
                     settings.node_gone_after_s)


def _evaluations(rows, now: datetime) -> Iterator[GaugeMetricFamily]:
    waiting = GaugeMetricFamily(
        "loraplane_evaluations", "Evaluations not finished, by base model and state: queued is the "
        "evaluation queue's depth (the database's, which outlives a lost broker message), running "
        "what workers hold", labels=["base_model", "state"])
    oldest = GaugeMetricFamily(
        "loraplane_evaluation_oldest_queued_seconds", "Age of the oldest queued evaluation, by base "
        "model: grows while no worker for that base takes work", labels=["base_model"])
    for base, state, count, first in rows:
        waiting.add_metric([base, state], count)
        if state == "queued" and first is not None:
            oldest.add_metric([base], (now - aware(first)).total_seconds())
    yield waiting
    yield oldest


def _deliveries(rows, now: datetime) -> Iterator[GaugeMetricFamily]:
    by_state = GaugeMetricFamily("loraplane_webhook_deliveries", "Webhook deliveries by state: "
                                 "pending is the housekeeper's backlog, failed gave up",
                                 labels=["state"])
    oldest = GaugeMetricFamily("loraplane_webhook_oldest_pending_seconds",
                               "Age of the oldest webhook delivery still pending (0 when none)")
    counts = {state: 0 for state in DELIVERY_STATES}
    oldest_pending = 0.0
    for state, count, first in rows:
        counts[state] = counts.get(state, 0) + count
        if state == "pending" and first is not None:
            oldest_pending = (now - aware(first)).total_seconds()
    for state, count in counts.items():
        by_state.add_metric([state], count)
    oldest.add_metric([], oldest_pending)
    yield by_state
    yield oldest


def _nodes(rows, now: datetime, stale_after_s: float, gone_after_s: float) -> GaugeMetricFamily:
    nodes = GaugeMetricFamily("loraplane_nodes", "Serving nodes by pool and freshness: stale ones "
                              "have not reported for LORAPLANE_NODE_STALE_AFTER_S and are no longer "
                              "counted; after LORAPLANE_NODE_GONE_AFTER_S a node leaves this metric",
                              labels=["pool", "state"])
    counts: dict[tuple[str, str], int] = {}
    for pool, reported_at in rows:
        silent_s = (now - aware(reported_at)).total_seconds()
        if silent_s > gone_after_s:
            counts.setdefault((pool, "fresh"), 0)
            counts.setdefault((pool, "stale"), 0)
            continue
        state = "stale" if silent_s > stale_after_s else "fresh"
        counts[(pool, state)] = counts.get((pool, state), 0) + 1
        counts.setdefault((pool, "fresh" if state == "stale" else "stale"), 0)
    for (pool, state), count in sorted(counts.items()):
        nodes.add_metric([pool, state], count)
    return nodes
