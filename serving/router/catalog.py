"""What a client's `model` means in this pool, from the active set:

- `tenant/name` is the production alias, split with the canary by the canary's weight;
- `tenant/name:alias` is that alias alone;
- `tenant/name@N` is version N, while the pool serves it.

A name resolves to a served name (`tenant/name@N`, pinned to its digest) or to nothing: never to
another adapter and never to the base. Other tenants' names do not exist for a caller."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from serving.router.errors import RouterError

MAX_LISTED = 50  # names listed in a 404


@dataclass(frozen=True)
class Target:
    served_name: str  # tenant/name@N
    adapter: str  # tenant/name
    alias: str  # production, canary, ... or "pinned"
    shadow_of: str | None = None  # production's served name, when this canary request is shadowed


@dataclass
class Catalog:
    pool: str = ""
    generation: int = -1
    # model string -> [(served name, weight, alias)]
    choices: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)
    names_by_tenant: dict[str, list[str]] = field(default_factory=dict)
    # canary served name -> share of its requests also sent to production
    shadows: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_active_set(cls, pool: str, generation: int, entries: list[dict[str, Any]]) -> Catalog:
        choices: dict[str, list[tuple[str, int, str]]] = defaultdict(list)
        shadows: dict[str, float] = {}
        for entry in entries:
            adapter, served = f"{entry['tenant']}/{entry['adapter']}", entry["served_name"]
            choices[served].append((served, 100, "pinned"))
            for alias in entry["aliases"]:
                if alias.get("shadow"):
                    shadows[served] = float(alias["shadow"])
                choices[f"{adapter}:{alias['alias']}"].append((served, 100, alias["alias"]))
                if alias["weight"] > 0:  # production and canary share the bare name
                    choices[adapter].append((served, alias["weight"], alias["alias"]))
        names: dict[str, list[str]] = defaultdict(list)
        for model in sorted(choices):
            names[model.split("/", 1)[0]].append(model)
        return cls(pool, generation, dict(choices), dict(names), shadows)

    def resolve(self, model: Any, tenant: str, rng: random.Random = random._inst) -> Target:
        if not isinstance(model, str) or not model:
            raise RouterError(400, "invalid_model", "'model' must be a string such as 'tenant/name'",
                              "Use tenant/name, tenant/name:alias or tenant/name@N.")
        options = self.choices.get(model) if model.startswith(tenant + "/") else None
        if not options:
            listed = self.names_for(tenant)
            raise RouterError(404, "model_not_found",
                              f"model {model[:200]!r} is not served in pool {self.pool!r} for tenant "
                              f"{tenant!r}", "Use one of the names listed in 'available' (GET /v1/models).",
                              available=listed[:MAX_LISTED])
        served, _, alias = options[0] if len(options) == 1 else \
            rng.choices(options, weights=[weight for _, weight, _ in options])[0]
        shadow_of = None
        if alias == "canary" and rng.random() < self.shadows.get(served, 0.0):
            shadow_of = next((name for name, _, other in options if other == "production"), None)
        return Target(served, served.split("@", 1)[0], alias, shadow_of)

    def names_for(self, tenant: str) -> list[str]:
        return self.names_by_tenant.get(tenant, [])

