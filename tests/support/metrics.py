"""A registry process's state as its /metrics tells it, for tests that wait on what the process
is doing (requests parked in a long-poll, uploads holding their slots) instead of sleeping."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from devkit.services import wait_for


def metric(client: httpx.Client, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels`, from the /metrics of the
    process `client` reaches (a registry's answers a global admin or a metrics token)."""
    return metric_at(client, "/metrics", name, **labels)


def metric_at(client: httpx.Client, url: str, name: str, **labels: str) -> float:
    """The same, from the metrics at `url`."""
    response = client.get(url)
    assert response.status_code == 200, response.text
    return sum(sample.value for family in text_string_to_metric_families(response.text)
               for sample in family.samples
               if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()))


def wait_for_long_polls(admin: httpx.Client, pool: str, count: int) -> None:
    """Until the process holds `count` long-polls of `pool`, each waiting for a change."""
    wait_for(lambda: metric(admin, "loraplane_active_set_long_polls", pool=pool) == count,
             timeout_s=20, what=f"{count} long-polls of pool {pool!r} to park")


def wait_for_uploads(admin: httpx.Client, stage: str, by_tenant: dict[str, int]) -> None:
    """Until the process has exactly these uploads at `stage` (awaiting_body, or receiving:
    holding an upload slot), per tenant."""
    def reached() -> bool:
        return all(metric(admin, "loraplane_uploads_in_progress", tenant=t, stage=stage) == count
                   for t, count in by_tenant.items())

    wait_for(reached, timeout_s=20, what=f"uploads {stage}: {by_tenant}")
