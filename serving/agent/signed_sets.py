"""Whether an active set is one the registry signed for this pool, and not older than one this node
already took.

The registry signs each pool's whole set (aliases, versions, digests, weights) at every change,
with the keys of the trust bundle. Attestations prove that a version was approved once; the signed
set proves that it is current. So the node:
- takes a set only when its signature verifies and its signed generation is not older than the
  last it took (kept on disk with the last-known-good set, so a restart does not forget it): an
  old set put back into the registry's database is refused, even by a registry restarted since;
- loads only entries the signed set names with the same digest (proof.py refuses the others,
  each on its own)."""

from __future__ import annotations

from typing import Any

from serving.agent.trust import TrustStore
from serving.registry_client import ActiveSet, NewestSigned
from signed_digests.provenance import TrustBundle, Unverified

PREFIX = "the active set is refused: "


class SignedSetCheck:
    def __init__(self, trust: TrustStore, pool: str) -> None:
        self.trust, self.pool = trust, pool
        self.newest = NewestSigned()  # the signed generation of the last set taken
        self.unknown_key = False  # signed by a key the bundle lacks: worth a refresh

    def took(self, active: ActiveSet | None) -> None:
        """The node took `active` (now, or before a restart: the last-known-good set)."""
        if active is not None:
            self.newest.admits(active)

    def problem(self, active: ActiveSet) -> str | None:
        """Why `active` must not be taken, or None. A node without a trust bundle yet takes it:
        it loads none of its entries until it can prove them (proof.py), signed set included."""
        self.unknown_key = False
        bundle = self.trust.bundle
        if active.signed is None:
            return PREFIX + "the registry sent no signed active set with it"
        if bundle is None:
            return None
        try:
            document = bundle.verify_active_set(active.signed)
        except Unverified as error:
            self.unknown_key = not claimed_keys(active.signed) & set(bundle.keys)
            return PREFIX + f"its signed set does not verify: {error}"
        if document.get("pool") != self.pool:
            return PREFIX + f"its signed set is pool {str(document.get('pool'))[:64]!r}'s, not {self.pool!r}"
        if not isinstance(document.get("generation"), int) or not self.newest.admits(active):
            return PREFIX + (f"its signed set is generation {str(document.get('generation'))[:20]}, older "
                             f"than generation {self.newest.generation} this node already took: an old "
                             "set was put back")
        return None


def signed_names(bundle: TrustBundle, signed: dict[str, Any]) -> frozenset[tuple[str, str]]:
    """(served name, digest) of every version a signed set names, once `bundle` verifies it.
    Raises Unverified."""
    document = bundle.verify_active_set(signed)
    names = set()
    listed = [item for part in ("aliases", "retiring") if isinstance(document.get(part), list)
              for item in document[part][:100_000]]
    for item in listed:
        if isinstance(item, dict) and isinstance(item.get("served_name"), str) and isinstance(item.get("digest"), str):
            names.add((item["served_name"], item["digest"]))
    return frozenset(names)


def claimed_keys(envelope: Any) -> set[str]:
    """The key ids an envelope says signed it (checked by nobody yet)."""
    signatures = envelope.get("signatures") if isinstance(envelope, dict) else None
    if not isinstance(signatures, list):
        return set()
    return {s["keyid"] for s in signatures[:16] if isinstance(s, dict) and isinstance(s.get("keyid"), str)}
