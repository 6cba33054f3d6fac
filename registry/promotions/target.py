"""What a promotion's gates look at, and what each of them answers."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from registry.tables import Adapter, AdapterVersion, Pool


@dataclass(frozen=True)
class Gate:
    name: str
    passed: bool
    message: str
    hint: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Target:
    pool: Pool
    adapter: Adapter
    version: AdapterVersion
    served_name: str
    alias: str
    weight: int | None
