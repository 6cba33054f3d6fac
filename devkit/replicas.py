"""Several registry replicas on one database, behind PgBouncer in transaction mode, as a
Kubernetes Deployment runs them: for the replica tests and `./dev bench fleet`."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from devkit import services


def behind_pgbouncer(bouncer: services.Service, direct_url: str) -> dict[str, str]:
    """The settings of a process whose database URL goes through `bouncer`, with LISTEN on the
    direct URL (the database's own, `direct_url`)."""
    database = direct_url.rsplit("/", 1)[1]
    return {"LORAPLANE_DATABASE_URL": f"{bouncer.url}/{database}", "LORAPLANE_DATABASE_PGBOUNCER": "true",
            "LORAPLANE_DATABASE_LISTEN_URL": direct_url}


def start_together(folder: Path, env: Mapping[str, str | None], count: int, *args: str) -> list[services.Service]:
    """`count` replicas started at once, as a rollout starts them; each with a data folder of its
    own (folder/replica-N). Stops those that started when one does not."""
    def start(index: int) -> services.Service:
        return services.start_registry(folder / f"replica-{index + 1}", dict(env), *args)

    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(start, index) for index in range(count)]
    started, failures = [], []
    for future in futures:
        try:
            started.append(future.result())
        except Exception as error:  # noqa: BLE001 - reported below, once the others are stopped
            failures.append(error)
    if failures:
        for service in started:
            service.stop()
        raise failures[0]
    return started
