"""Whether an active-set entry is proven: its attestation is signed by a key the node trusts (and
trusts now: a rotated-out key's trust ends), it is about exactly this served name, digest and
files, and it approves them for this node's pool. An entry that is not proven is never
downloaded or loaded, whatever the registry's database says.

Checking is cheap (one Ed25519 signature per entry) but runs every pass, so a result is reused
for the same entry and bundle for `recheck_s`; that is also how soon a key whose trust ended is
noticed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from serving.agent.entries import Entry, shown
from serving.agent.trust import TrustStore
from signed_digests.provenance import Unverified, check_subject

PREFIX = "refused, not proven: "


@dataclass
class _Checked:
    reason: str | None
    unknown_key: bool  # signed by no key the bundle holds (or there is no bundle)
    at: float
    bundle: object


class ProofCheck:
    def __init__(self, trust: TrustStore, pool: str, recheck_s: float = 60) -> None:
        self.trust, self.pool, self.recheck_s = trust, pool, recheck_s
        self.unknown_key = False  # an attestation names a key the bundle lacks: worth a refresh
        self._memo: dict[tuple, _Checked] = {}

    def refusals(self, wanted: dict[str, Entry]) -> dict[str, str]:
        """Served name -> why, for each entry of `wanted` that is not proven."""
        now, bundle, seen, refused = time.monotonic(), self.trust.bundle, {}, {}
        for name, entry in wanted.items():
            key = _key(entry)
            checked = self._memo.get(key)
            if checked is None or checked.bundle is not bundle or now - checked.at > self.recheck_s:
                checked = _Checked(self._check(entry), self._unknown_key(entry), now, bundle)
            seen[key] = checked
            if checked.reason is not None:
                refused[name] = checked.reason
                self.unknown_key |= checked.unknown_key
        self._memo = seen  # forget entries that left the set
        return refused

    def _check(self, entry: Entry) -> str | None:
        bundle = self.trust.bundle
        if entry.attestation is None:
            return PREFIX + "the registry sent no attestation for it"
        if bundle is None:
            why = f" ({self.trust.problem})" if self.trust.problem else ""
            return PREFIX + f"the node holds no trust bundle yet{why}"
        try:
            statement = bundle.verify(entry.attestation)
            check_subject(statement, entry.served_name, entry.digest, entry.manifest())
        except Unverified as error:
            return PREFIX + str(error)
        predicate = statement.get("predicate")
        predicate = predicate if isinstance(predicate, dict) else {}
        if predicate.get("pool") != self.pool:
            return PREFIX + f"the attestation approves it for pool {shown(predicate.get('pool'))}, " \
                            f"not {self.pool!r}"
        if predicate.get("served_name") != entry.served_name:
            return PREFIX + f"the attestation's predicate names {shown(predicate.get('served_name'))}"
        return None

    def _unknown_key(self, entry: Entry) -> bool:
        bundle = self.trust.bundle
        return entry.attestation is not None and (
            bundle is None or not _claimed(entry.attestation) & set(bundle.keys))


def _key(entry: Entry) -> tuple:
    envelope = entry.attestation or {}
    signatures = envelope.get("signatures")
    return (entry.served_name, entry.digest, tuple((f.name, f.sha256) for f in entry.files),
            str(envelope.get("payloadType")), str(envelope.get("payload")),
            repr(signatures) if isinstance(signatures, list) else None)


def _claimed(envelope: dict[str, Any]) -> set[str]:
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list):
        return set()
    return {s["keyid"] for s in signatures[:16]
            if isinstance(s, dict) and isinstance(s.get("keyid"), str)}

