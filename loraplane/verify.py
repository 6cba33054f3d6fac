"""Walk an adapter version's provenance chain, from its bytes to the audit log: what
`loraplane verify` checks.

The registry is only where the pieces come from. Its answers are believed where a signature from
the trust bundle covers them: the version's files must be the attested subjects, the attestation
must be signed by a trusted key, and the audit event it names must be in the log."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from loraplane_client.connection import RegistryError, checked
from signed_digests import provenance
from signed_digests.digests import manifest_digest
from signed_digests.folder_hashes import hash_folder

AUDIT_PAGE = 200
MAX_AUDIT_PAGES = 50  # 10,000 events under one pool/served-name subject is far more than any has

HOLDS, FAILS, UNCHECKED = "holds", "fails", "unchecked"


class VerifyUsageError(Exception):
    """What was asked cannot be checked at all (a missing or unreadable trust bundle file)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass
class Link:
    """One link of the chain, and whether it holds."""

    name: str
    state: str  # HOLDS, FAILS or UNCHECKED (this token may not look)
    detail: str
    hint: str = ""


@dataclass
class AttestationChain:
    """One attestation of the version, with the links that hang on it. Only the newest one per
    pool counts: an earlier one was superseded (re-signed after a key rotation, or replaced by a
    later approval), and a key retired since may no longer vouch for it."""

    id: int
    pool: str
    action: str
    key_id: str
    created_at: str
    current: bool
    statement: dict[str, Any]
    links: list[Link] = field(default_factory=list)


@dataclass
class Report:
    served_name: str
    digest: str
    files: list[dict[str, Any]]
    trust_bundle_source: str
    links: list[Link] = field(default_factory=list)  # bytes, folder, trust bundle
    attestations: list[AttestationChain] = field(default_factory=list)

    def counted(self) -> list[tuple[str, Link]]:
        """(where, link) for every link the verdict rests on."""
        out = [("", link) for link in self.links]
        for chain in self.attestations:
            if chain.current:
                out += [(f"attestation {chain.id} ({chain.pool})", link) for link in chain.links]
        return out

    @property
    def holds(self) -> bool:
        return all(link.state != FAILS for _, link in self.counted())

    def as_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {"holds": self.holds, **asdict(self)}


def verify(client: httpx.Client, tenant: str, name: str, number: int, *, pool: str | None = None,
           folder: Path | None = None, trust_bundle_file: Path | None = None,
           show_progress: bool = True) -> Report:
    """Fetch the version, its attestations and the trust bundle, and check each link. The
    registry's refusals (no such version, another tenant's) raise RegistryError."""
    base = f"/v1/adapters/{tenant}/{name}/versions/{number}"
    version = checked(client.get(base))
    attestations = checked(client.get(f"{base}/attestations"))
    if trust_bundle_file is not None:
        signed, source = _read_bundle_file(trust_bundle_file), f"pinned file {trust_bundle_file}"
    else:
        signed = checked(client.get(provenance.TRUST_BUNDLE_PATH))
        source = f"fetched from the registry itself ({client.base_url.join(provenance.TRUST_BUNDLE_PATH)})"
    files = [{"name": f["name"], "sha256": f["sha256"], "size": f["size"]} for f in version["files"]]
    # The name asked for, not the one the registry answers with: each link is checked against it.
    report = Report(f"{tenant}/{name}@{number}", version["digest"], files, source)
    report.links.append(_bytes_link(version, report.served_name))
    if folder is not None:
        report.links.append(_folder_link(folder, files, show_progress))
    bundle, bundle_link = _bundle(signed, source)
    report.links.append(bundle_link)
    audit = AuditLookup(client)
    chosen = [a for a in attestations if pool is None or _pool_of(a) == pool]
    newest: dict[str, int] = {}
    for item in chosen:
        newest[_pool_of(item)] = max(newest.get(_pool_of(item), 0), item["id"])
    for item in chosen:
        report.attestations.append(_chain(item, item["id"] == newest[_pool_of(item)], bundle,
                                          report, audit, pool))
    if not chosen:
        where = f" in pool {pool}" if pool else ""
        report.links.append(Link(
            "attestation", FAILS, f"{report.served_name} has no attestation{where}: nothing signed "
                                  f"says it was approved to serve",
            f"Only an approved promotion is attested (loraplane promotion request POOL "
            f"{report.served_name}, then a reviewer approves it)." if not attestations else
            f"It is attested in: {', '.join(sorted({_pool_of(a) for a in attestations}))}."))
    return report


def _read_bundle_file(path: Path) -> dict[str, Any]:
    try:
        size = path.stat().st_size
        if size > provenance.MAX_ENVELOPE_BYTES:  # bounded before it is parsed
            raise VerifyUsageError(f"{path} is {size} bytes, larger than a trust bundle can be "
                                   f"({provenance.MAX_ENVELOPE_BYTES})")
        return json.loads(path.read_bytes())
    except OSError as error:
        raise VerifyUsageError(f"cannot read the trust bundle {path}: {error.strerror}",
                               "Save the registry's /.well-known/loraplane/trust-bundle.json "
                               "and pass that file.") from None
    except ValueError as error:
        raise VerifyUsageError(f"the trust bundle {path} is not JSON ({error})",
                               "Pass the bundle exactly as the registry serves it.") from None


def _bytes_link(version: dict[str, Any], served_name: str) -> Link:
    """The registry's file list must hash to the digest it names (the agent checks the same)."""
    if version["served_name"] != served_name:
        return Link("bytes", FAILS, f"asked for {served_name}, the registry answered with "
                                    f"{version['served_name']}",
                    "The registry is not answering for the version asked; do not trust it.")
    listed = manifest_digest(version["files"])
    if listed != version["digest"]:
        return Link("bytes", FAILS, f"the registry's file list hashes to {listed[:12]}…, not to "
                                    f"the version's digest {version['digest'][:12]}…",
                    "The registry's record of this version was changed; do not serve it.")
    source = version.get("derived_from")
    if source and manifest_digest(source["files"]) != source["digest"]:
        return Link("bytes", FAILS, f"the upload this version was derived from lists files that hash to "
                                    f"{manifest_digest(source['files'])[:12]}…, not to its digest "
                                    f"{source['digest'][:12]}…",
                    "The registry's record of this version's provenance was changed; do not serve it.")
    derived = f", derived by {source['transform']} from upload {source['digest']}" if source else ""
    return Link("bytes", HOLDS, f"digest {version['digest']} covers {len(version['files'])} files{derived}")


def _folder_link(folder: Path, files: list[dict[str, Any]], show_progress: bool) -> Link:
    """Every file of the version in the folder, nothing else, each with its sha256."""
    if not folder.is_dir():
        raise VerifyUsageError(f"--folder {folder} is not a folder")
    found = hash_folder(folder, show_progress=show_progress)
    expected = {f["name"]: f["sha256"] for f in files}
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    changed = sorted(n for n in set(expected) & set(found) if found[n] != expected[n])
    problems = ([f"{n} differs (sha256 {found[n][:12]}…, attested {expected[n][:12]}…)" for n in changed]
                + [f"{n} is missing" for n in missing] + [f"{n} is not part of the version" for n in extra])
    if problems:
        return Link("folder", FAILS, f"{folder}: " + "; ".join(problems),
                    "These bytes are not the ones approved: download the version again (GET "
                    ".../download) and do not load this folder.")
    return Link("folder", HOLDS, f"{folder}: every file present, none extra, each sha256 equal")


def _bundle(signed: Any, source: str) -> tuple[provenance.TrustBundle | None, Link]:
    try:
        bundle = provenance.TrustBundle.parse(signed)
    except provenance.Unverified as error:
        return None, Link("trust bundle", FAILS, str(error),
                          "Use the bundle the registry publishes at "
                          "/.well-known/loraplane/trust-bundle.json, unmodified.")
    keys = ", ".join(k[:16] + "…" for k in sorted(bundle.keys))
    return bundle, Link("trust bundle", HOLDS, f"version {bundle.version}, {source}; keys {keys}")


def _pool_of(item: dict[str, Any]) -> str:
    return (item["statement"].get("predicate") or {}).get("pool") or item["pool"]


def _chain(item: dict[str, Any], current: bool, bundle: provenance.TrustBundle | None,
           report: Report, audit: AuditLookup, pool: str | None) -> AttestationChain:
    chain = AttestationChain(item["id"], _pool_of(item), item["action"], item["key_id"],
                             str(item["created_at"]), current, item["statement"])
    if bundle is None:
        chain.links.append(Link("signature", FAILS, "no trust bundle to check it against"))
        return chain
    try:
        chain.statement = bundle.verify(item["envelope"])
    except provenance.Unverified as error:
        chain.links.append(Link("signature", FAILS, str(error),
                                "The trust bundle does not vouch for this attestation: check that "
                                "the bundle is this registry's, current, and that the key was not "
                                "retired before it was re-signed."))
        return chain  # nothing unsigned is worth comparing further
    chain.links.append(Link("signature", HOLDS, f"signed by key {item['key_id'][:16]}…, trusted"))
    signed_for = (chain.statement.get("predicate") or {}).get("pool")
    expected = pool or item["pool"]  # the registry's label was only a hint until now
    if signed_for != expected:
        chain.links.append(Link("pool", FAILS, f"signed for pool {signed_for!r}, not {expected!r}",
                                "The registry labels this attestation with another pool than it "
                                "was signed for; do not trust its listing."))
        return chain
    try:
        provenance.check_subject(chain.statement, report.served_name, report.digest, report.files)
        chain.links.append(Link("subjects", HOLDS, f"the signed subjects are {report.served_name}'s "
                                                   f"digest and its {len(report.files)} files"))
    except provenance.Unverified as error:
        chain.links.append(Link("subjects", FAILS, str(error),
                                "The registry's record of this version differs from what was "
                                "approved; do not serve it."))
    if current:
        chain.links.append(audit.check(chain.statement, report))
    return chain


class AuditLookup:
    """Find the audit event an attestation names, in the registry's log."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.refused: RegistryError | None = None  # asked once: the token's rights do not change

    def check(self, statement: dict[str, Any], report: Report) -> Link:
        predicate = statement.get("predicate") or {}
        wanted = predicate.get("audit_event_hash")
        if not wanted:
            return Link("audit event", FAILS, "the attestation names no audit event",
                        "It was issued without its audit event; ask an admin to check the "
                        "promotion's history (GET /v1/audit).")
        subject = f"pool/{predicate.get('pool')}/{predicate.get('served_name')}"
        if self.refused is not None:
            return self._unchecked(wanted, self.refused)
        try:
            event = self._find(subject, wanted)
        except RegistryError as error:
            if error.status not in (401, 403):
                return Link("audit event", FAILS, f"the audit log could not be read: {error.message}",
                            error.hint)
            self.refused = error
            return self._unchecked(wanted, error)
        if event is None:
            return Link("audit event", FAILS, f"{wanted} is not in the audit log under {subject}",
                        "The event the approval names is gone: run loraplane audit verify "
                        "(or GET /v1/audit/verify) to check the chain.")
        recorded = (event.get("after") or {}).get("digest")
        if recorded is not None and recorded != report.digest:
            return Link("audit event", FAILS, f"event {event['id']} records digest {recorded[:12]}…, "
                                              f"not {report.digest[:12]}…",
                        "The audit log and the attestation disagree; do not serve it.")
        return Link("audit event", HOLDS, f"{wanted} found: event {event['id']}, {event['action']} "
                                          f"by {event['actor']} at {event['at']}")

    def _unchecked(self, wanted: str, error: RegistryError) -> Link:
        return Link("audit event", UNCHECKED,
                    f"{wanted} not looked up: this token may not read the audit log "
                    f"({error.message})",
                    "An admin token of the tenant (or a global admin's) may read its audit log.")

    def _find(self, subject: str, wanted: str) -> dict[str, Any] | None:
        # The subject filter matches by prefix (…@1 also finds …@10), so compare it exactly.
        cursor = None
        for _ in range(MAX_AUDIT_PAGES):
            params: dict[str, str | int] = {"subject": subject, "limit": AUDIT_PAGE,
                                            **({"cursor": cursor} if cursor else {})}
            page = checked(self.client.get("/v1/audit", params=params))
            for event in page["items"]:
                if event["hash"] == wanted and event["subject"] == subject:
                    return event
            cursor = page.get("next_cursor")
            if not cursor:
                return None
        return None
