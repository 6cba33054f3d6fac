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

from serving.agent import signed_sets
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
        self._names_memo: tuple[tuple, frozenset | str] | None = None

    def refusals(self, wanted: dict[str, Entry], signed: dict[str, Any] | None = None) -> dict[str, str]:
        """Served name -> why, for each entry of `wanted` that is not proven. `signed`: the
        pool's signed set (signed_sets.py), which must name an entry with its digest; None for a
        last-known-good set kept before sets were signed (the registry sends none unsigned)."""
        now, bundle, seen, refused = time.monotonic(), self.trust.bundle, {}, {}
        named = self._signed_names(signed, bundle)
        for name, entry in wanted.items():
            key = _key(entry)
            checked = self._memo.get(key)
            if checked is None or checked.bundle is not bundle or now - checked.at > self.recheck_s:
                checked = _Checked(self._check(entry), self._unknown_key(entry), now, bundle)
            seen[key] = checked
            if checked.reason is not None:
                refused[name] = checked.reason
                self.unknown_key |= checked.unknown_key
            elif isinstance(named, str):
                refused[name] = named
            elif named is not None and (entry.served_name, entry.digest) not in named:
                refused[name] = PREFIX + "the pool's signed active set does not name it with this digest"
        self._memo = seen  # forget entries that left the set
        return refused

    def _signed_names(self, signed: dict[str, Any] | None, bundle) -> frozenset | str | None:
        """The signed set's (served name, digest) pairs, or why it does not verify."""
        if signed is None or bundle is None:  # without a bundle, no entry is proven anyway
            return None
        key = (id(bundle), str(signed.get("payload")), repr(signed.get("signatures")))
        if self._names_memo is None or self._names_memo[0] != key:
            try:
                names: frozenset | str = signed_sets.signed_names(bundle, signed)
            except Unverified as error:
                names = PREFIX + f"the pool's signed active set does not verify: {error}"
            self._names_memo = (key, names)
        return self._names_memo[1]

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
            bundle is None or not signed_sets.claimed_keys(entry.attestation) & set(bundle.keys))


def _key(entry: Entry) -> tuple:
    envelope = entry.attestation or {}
    signatures = envelope.get("signatures")
    return (entry.served_name, entry.digest, tuple((f.name, f.sha256) for f in entry.files),
            str(envelope.get("payloadType")), str(envelope.get("payload")),
            repr(signatures) if isinstance(signatures, list) else None)
