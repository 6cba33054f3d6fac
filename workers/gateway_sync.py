"""Keep the inference gateway's objects (registry/gateway) in step with the active sets, on the
housekeeper that leads (workers/housekeeping.py), every LORAPLANE_GATEWAY_INTERVAL_S.

Each round lists loraplane's objects of the three kinds (by their ownership labels) and compares
them with what the registry says: a round that finds nothing changed writes nothing. Then:

- a missing or different object is applied with server-side apply, as field manager `loraplane`,
  carrying only the fields loraplane declares. Other managers' fields (a status, an annotation
  someone added) are left alone.
- A 409 Conflict means another manager holds a field loraplane declares, with another value.
  If every such manager changed it by an update (kubectl edit, patch: operation Update in
  managedFields), that is drift on loraplane's own fields, and it is corrected: the apply is
  forced, which takes back only the fields in loraplane's apply. If a manager applied it
  (operation Apply: a GitOps tool, another controller), that is a conflict between two owners:
  reported (log, metric, the round's result) and left alone, unless
  LORAPLANE_GATEWAY_FORCE_CONFLICTS says loraplane wins.
- An object of a name loraplane would use that does not carry loraplane's labels is someone
  else's: reported, never applied over.
- An object carrying loraplane's labels that no pool or alias needs any more is deleted; one of a
  pool whose active set could not be read this round is kept. Nothing without both labels
  (app.kubernetes.io/managed-by: loraplane, loraplane.dev/registry: <instance>) is deleted."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from lightkube import Client, KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.core.client import LabelSelector
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType

from registry.gateway.objects import (FIELD_MANAGER, INFERENCE_POOL, INFERENCE_POOL_GROUP,
                                      INFERENCE_POOL_VERSION, MODEL_REWRITE, OBJECTIVE, POOL_ANNOTATION,
                                      GatewaySpec)
from registry.db import plain_transaction
from registry.gateway import service
from registry.gateway.service import Desired
from registry.leadership.service import Leadership
from workers import metrics

log = logging.getLogger(__name__)
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
API_TIMEOUT_S = 10
PLURALS = {INFERENCE_POOL: "inferencepools", MODEL_REWRITE: "inferencemodelrewrites",
           OBJECTIVE: "inferenceobjectives"}


def api_client(api_url: str | None, account: Path = SERVICE_ACCOUNT) -> Client:
    """The API at `api_url` (no credentials: `kubectl proxy`, or a test's), else the pod's own API
    server with its service account's token (read again as it rotates) and CA."""
    if api_url is not None:
        config = KubeConfig.from_one(cluster=Cluster(server=api_url), user=User())
    else:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        config = KubeConfig.from_one(cluster=Cluster(server=server, certificate_auth=str(account / "ca.crt")),
                                     user=User(token_file=str(account / "token")))
    return Client(config, timeout=httpx2.Timeout(API_TIMEOUT_S), trust_env=False, field_manager=FIELD_MANAGER)


class MissingKind(Exception):
    """The cluster does not serve one of the kinds (its CRD is missing, or another version)."""


@dataclass
class Round:
    """What one round did, by object ("Kind/name")."""
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    corrected: list[str] = field(default_factory=list)  # drift on loraplane's fields, taken back
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    conflicts: dict[str, str] = field(default_factory=dict)  # object -> why it was left alone
    failed: dict[str, str] = field(default_factory=dict)  # object -> what the API server answered

    @property
    def writes(self) -> int:
        return len(self.created) + len(self.updated) + len(self.corrected) + len(self.deleted)


class GatewaySync:
    def __init__(self, client: Client, spec: GatewaySpec, *, force_conflicts: bool = False) -> None:
        self.client, self.spec, self.force_conflicts = client, spec, force_conflicts
        group, version = spec.llmd_api_version.split("/")
        self.resources = {
            INFERENCE_POOL: create_namespaced_resource(INFERENCE_POOL_GROUP, INFERENCE_POOL_VERSION,
                                                       INFERENCE_POOL, PLURALS[INFERENCE_POOL]),
            MODEL_REWRITE: create_namespaced_resource(group, version, MODEL_REWRITE, PLURALS[MODEL_REWRITE]),
            OBJECTIVE: create_namespaced_resource(group, version, OBJECTIVE, PLURALS[OBJECTIVE]),
        }

    def reconcile(self, desired: Desired) -> Round:
        done = Round()
        live = {kind: self._owned(kind) for kind in self.resources}
        for wanted in desired.objects:
            kind, name = wanted["kind"], wanted["metadata"]["name"]
            current = live[kind].pop(name, None)
            if current is not None and covers(current, wanted):
                done.unchanged += 1
            else:
                self._apply(wanted, current, done)
        for kind, leftovers in live.items():
            for name, current in sorted(leftovers.items()):
                pool = (current.get("metadata", {}).get("annotations") or {}).get(POOL_ANNOTATION)
                if pool in desired.unread:
                    continue
                try:
                    self.client.delete(self.resources[kind], name, namespace=self.spec.namespace)
                except ApiError as error:
                    if error.status.code != 404:  # gone already: as wanted
                        raise
                log.info("gateway: deleted %s/%s (no pool or alias needs it)", kind, name)
                done.deleted.append(f"{kind}/{name}")
        return done

    def _owned(self, kind: str) -> dict[str, dict[str, Any]]:
        selector: LabelSelector = dict(self.spec.owned)
        resource = self.resources[kind]
        found = {}
        try:
            listed = list(self.client.list(resource, namespace=self.spec.namespace, labels=selector))
        except ApiError as error:
            if error.status.code != 404:
                raise
            info = resource._api_info.resource
            raise MissingKind(f"the Kubernetes API does not serve {kind} ({info.group}/{info.version}) in "
                              f"namespace {self.spec.namespace}: install the gateway's CRDs, or set "
                              "LORAPLANE_GATEWAY_LLMD_API_VERSION to the version installed") from None
        for item in listed:
            raw = _raw(item)
            # Checked here too: only an object carrying both labels is loraplane's to change or delete.
            if self.spec.owned.items() <= (raw.get("metadata", {}).get("labels") or {}).items():
                found[raw["metadata"]["name"]] = raw
        return found

    def _apply(self, wanted: dict[str, Any], current: dict[str, Any] | None, done: Round) -> None:
        kind, name = wanted["kind"], wanted["metadata"]["name"]
        key = f"{kind}/{name}"
        if current is None:
            someone_elses = self._get(kind, name)
            if someone_elses is not None:
                done.conflicts[key] = ("an object of this name exists without loraplane's labels: "
                                       "rename or remove it, loraplane never applies over it")
                log.warning("gateway: %s left alone: %s", key, done.conflicts[key])
                return
        try:
            self._patch(wanted, force=False)
        except ApiError as error:
            if error.status.code != 409:  # refused (422, 403): the other objects still go
                done.failed[key] = f"HTTP {error.status.code}: {error.status.message}"
                log.error("gateway: %s not applied: %s", key, done.failed[key])
                return
            owners = self._other_owners(kind, name, wanted)
            appliers = sorted(manager for manager, operation in owners if operation == "Apply")
            if appliers and not self.force_conflicts:
                done.conflicts[key] = (f"field manager(s) {', '.join(appliers)} applied other values to "
                                       "fields loraplane declares; set LORAPLANE_GATEWAY_FORCE_CONFLICTS "
                                       "to take them back, or stop the other manager")
                log.warning("gateway: %s left alone: %s", key, done.conflicts[key])
                return
            self._patch(wanted, force=True)
            log.info("gateway: %s taken back from %s", key, sorted({m for m, _ in owners}) or "another manager")
            done.corrected.append(key)
            return
        (done.created if current is None else done.updated).append(key)
        log.info("gateway: %s %s", "created" if current is None else "updated", key)

    def _patch(self, wanted: dict[str, Any], *, force: bool) -> None:
        self.client.patch(self.resources[wanted["kind"]], wanted["metadata"]["name"], wanted,
                          namespace=self.spec.namespace, patch_type=PatchType.APPLY,
                          field_manager=FIELD_MANAGER, force=force)

    def _get(self, kind: str, name: str) -> dict[str, Any] | None:
        try:
            return _raw(self.client.get(self.resources[kind], name, namespace=self.spec.namespace))
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise

    def _other_owners(self, kind: str, name: str, wanted: dict[str, Any]) -> set[tuple[str, str]]:
        """(manager, operation) of the other managers holding a field loraplane declares with a
        value other than loraplane's."""
        current = self._get(kind, name) or {}
        differing = [path for path, value in leaves(wanted) if value_at(current, path) != value]
        owners = set()
        for entry in current.get("metadata", {}).get("managedFields") or []:
            if entry.get("manager") == FIELD_MANAGER:
                continue
            if any(touches(entry.get("fieldsV1") or {}, path) for path in differing):
                owners.add((entry.get("manager", "?"), entry.get("operation", "?")))
        return owners


def covers(live: Any, wanted: Any) -> bool:
    """Whether the live object holds every field loraplane declares, with its value (it may hold
    more: status, defaults, others' fields). Lists are compared whole, as these kinds' lists are
    atomic."""
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(k in live and covers(live[k], v) for k, v in wanted.items())
    return bool(live == wanted)


IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}


def leaves(value: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(path, value) of every field an apply declares: dicts are walked, anything else (lists
    included) is one field."""
    if isinstance(value, dict) and value:
        return [found for key, item in value.items() for found in leaves(item, (*path, key))
                if found[0] not in IDENTITY]
    return [(path, value)]


def value_at(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def touches(fields: dict[str, Any], path: tuple[str, ...]) -> bool:
    """Whether a managedFields entry's fieldsV1 holds the field at `path`, something under it, or
    a whole (atomic) field above it."""
    node = fields
    for depth, key in enumerate(path, 1):
        child = node.get(f"f:{key}")
        if child is None:
            return False
        if not child and depth < len(path):  # an owned value above the path: all of it is this manager's
            return True
        node = child
    return True


def _raw(item: Any) -> dict[str, Any]:
    return item.to_dict() if hasattr(item, "to_dict") else dict(item)


class Follower:
    """The objects the registry wants, read again only when a pool's generation changed (a
    change to its set, a pool made or dropped) or a pool could not be read last time: an
    unchanged registry costs one query a round."""

    def __init__(self, spec: GatewaySpec) -> None:
        self.spec = spec
        self._seen: tuple[dict[str, int], Desired] | None = None

    def desired(self, session: Any) -> Desired:
        now = service.generations(session)
        if self._seen is None or self._seen[0] != now or self._seen[1].unread:
            self._seen = (now, service.desired(session, self.spec))
        return self._seen[1]


def run_forever(leadership: Leadership, settings: Any) -> None:
    """The housekeeper's loop (LORAPLANE_GATEWAY_RECONCILE): a round every
    LORAPLANE_GATEWAY_INTERVAL_S while this housekeeper leads."""
    spec = GatewaySpec.from_settings(settings)
    sync: GatewaySync | None = None
    follower = Follower(spec)
    while True:
        leadership.wait_to_lead()
        try:
            if sync is None:  # out of a cluster without LORAPLANE_GATEWAY_API_URL: said every round
                sync = GatewaySync(api_client(settings.gateway_api_url), spec,
                                   force_conflicts=settings.gateway_force_conflicts)
            with plain_transaction() as session:
                desired = follower.desired(session)
            done = sync.reconcile(desired)
            for action in ("created", "updated", "corrected", "deleted"):
                metrics.GATEWAY_WRITES.labels(action).inc(len(getattr(done, action)))
            metrics.GATEWAY_CONFLICTS.set(len(done.conflicts) + len(done.failed))
            metrics.GATEWAY_ROUNDS.labels("ok").inc()
            metrics.LAST_ROUND.labels("gateway-sync").set_to_current_time()
        except Exception:  # the database or the API server is away, or a CRD is missing: next round
            log.exception("gateway reconciliation round failed")
            metrics.GATEWAY_ROUNDS.labels("failed").inc()
        time.sleep(settings.gateway_interval_s)
