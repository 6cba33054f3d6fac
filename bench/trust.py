"""Trust benchmark: every attack of bench/trust_attacks, one leaked credential of each kind and a
database writer without the registry host's keys, against a running registry and router.

Run: ./dev bench trust    (or: python -m bench.trust)

It starts PostgreSQL, an S3 server, a registry and a router, builds the attacked deployment
through the API (bench/trust_attacks/world.py), runs every attack once, and records:
- attacks: attacks run;
- succeeded: attacks that got what they wanted (a prompt at the attacker's server, a canary
  moved, bytes signed, a record changed); the goal is 0;
- refused_ratio: attacks refused over attacks run;
- p50_attack_s: the median time one attack took, end to end.
Per credential, params has how many attacks it made and how many succeeded, and the name and
outcome of every attack; an attack listed as open is a hole known and not closed yet.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path


from bench import report
from bench.trust_attacks.catalogue import catalogue
from bench.trust_attacks.world import CREDENTIALS, build
from devkit import services
from registry.auth.principal import Role
from registry.db import make_engine
from registry.tokens import issuing as tokens
from devkit.units_of_work import unit_of_work

BUCKET = "bench-trust"


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    os.environ["LORAPLANE_CANARY_GRACE_S"] = "0"  # the canary checks here judge windows sent just now
    work = Path(tempfile.mkdtemp(prefix="loraplane-bench-"))
    work.chmod(0o755)
    running: list = []
    try:
        database_url, s3_server = services.start_database_and_store(work, running, BUCKET)
        registry = services.start_registry(work / "registry", services.registry_env(database_url, s3_server, BUCKET))
        running.append(registry)
        engine = make_engine(database_url)
        with unit_of_work(engine) as session:
            _, admin_token = tokens.create_token(session, subject="operator", role=Role.ADMIN, tenant=None,
                                                 actor="bench")
        world, started = build(registry.url, engine, admin_token, work)
        running.extend(started)
        outcomes, seconds = [], []
        for attack in catalogue():
            began = time.perf_counter()
            outcome = attack.run(world)
            seconds.append(time.perf_counter() - began)
            outcomes.append((attack, outcome))
            print(f"{'SUCCEEDED' if outcome.succeeded else 'refused  '} {attack.credential}/{attack.name}: "
                  f"{outcome.detail}", flush=True)
        world.impostor.__exit__()
        world.close()
        made = Counter(a.credential for a, _ in outcomes)
        won = Counter(a.credential for a, o in outcomes if o.succeeded)
        report.write("trust", {
            "attacks": len(outcomes),
            "succeeded": sum(won.values()),
            "refused_ratio": round(1 - sum(won.values()) / len(outcomes), 3),
            "p50_attack_s": round(statistics.median(seconds), 3),
        }, {
            "attacks_by_credential": {c: made[c] for c in CREDENTIALS},
            "succeeded_by_credential": {c: won[c] for c in CREDENTIALS},
            "outcomes": {f"{a.credential}/{a.name}": {"succeeded": o.succeeded, "detail": o.detail,
                                                      **({"open": a.open_because} if a.open_because else {})}
                         for a, o in outcomes},
            "database": "postgresql", "s3_server": "moto_server", "router": "loraplane router, one process",
        })
        engine.dispose()
    finally:
        for service in reversed(running):
            service.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
