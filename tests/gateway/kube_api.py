"""A Kubernetes API for the gateway reconciler: kmock's emulator (no API server runs here) with the
part of server-side apply the reconciler relies on, which kmock does not implement (it merges
every PATCH as a JSON merge, keeps no managedFields, and ignores label selectors).

What is emulated, minimally, and as Kubernetes documents it
(kubernetes.io/docs/reference/using-api/server-side-apply/):
- a PATCH with Content-Type application/apply-patch+yaml and ?fieldManager= is an apply: it
  creates the object if missing, sets every field it declares, removes the fields this manager
  applied before and no longer declares (unless another manager holds them too), and records its
  fields in metadata.managedFields (operation Apply, fieldsV1 as nested "f:" keys);
- a field another manager holds with another value is a conflict: 409 with details.causes, one
  FieldManagerConflict per field, unless ?force=true, which moves those fields to the applier;
- any other PATCH is an update (operation Update) by ?fieldManager= (default kubectl-edit): it
  merges, and the fields whose value it changed become its own, taken from whoever held them;
- a list's labelSelector of key=value pairs is honoured.
Lists are atomic fields here, as they are in these kinds' CRDs (no listType map among them)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import aiohttp.web
from kmock import KubernetesEmulator, KubernetesError

from kmock import Server, resource

from devkit.services import free_port

APPLY = "application/apply-patch"
IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace"),
            ("metadata", "managedFields"), ("metadata", "resourceVersion")}


def _leaves(value: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    if isinstance(value, dict) and value:
        found: dict[tuple[str, ...], Any] = {}
        for key, item in value.items():
            found.update(_leaves(item, (*path, key)))
        return {p: v for p, v in found.items() if p[:2] not in IDENTITY and p[:1] not in IDENTITY}
    return {path: value}


def _get(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _set(target: dict, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = copy.deepcopy(value)


def _remove(target: dict, path: tuple[str, ...]) -> None:
    for key in path[:-1]:
        target = target.get(key, {})
    target.pop(path[-1], None)


def _fields(paths: set[tuple[str, ...]]) -> dict:
    tree: dict = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


def _paths(tree: dict, path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    if not tree:
        return {path} if path else set()
    return {found for key, node in tree.items() for found in _paths(node, (*path, key[2:]))}


class ApplyingEmulator(KubernetesEmulator):
    """kmock's KubernetesEmulator with server-side apply, managedFields and conflicts, as above."""

    async def _handle(self, request):
        if request.resource is not None and request.name and request.method == "PATCH":
            async with self._lock:
                if request.headers.get("Content-Type", "").startswith(APPLY):
                    stored = self._apply(request)
                else:
                    stored = self._update(request)
            return aiohttp.web.json_response(stored)
        return await super()._handle(request)

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        # A Status with exactly Content-Type application/json, as the API server answers: lightkube
        # turns only that into an ApiError (kmock's aiohttp adds a charset).
        status = getattr(exc, "status", 500) if isinstance(exc, KubernetesError) else 500
        details = exc.details if isinstance(exc, KubernetesError) and exc.details else {}
        body = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "code": status,
                "reason": getattr(exc, "reason", None) or type(exc).__name__,
                "message": getattr(exc, "message", None) or repr(exc), "details": details}
        return aiohttp.web.Response(body=json.dumps(body).encode(), status=status,
                                    headers={"Content-Type": "application/json"})

    async def _serve_list(self, request):
        listed = await super()._serve_list(request)
        wanted = dict(pair.split("=", 1) for pair in request.params.get("labelSelector", "").split(",") if pair)
        listed["items"] = [item for item in listed["items"]
                           if wanted.items() <= ((item.get("metadata") or {}).get("labels") or {}).items()]
        return listed

    def _key(self, request):
        return request.resource, request.namespace, request.name

    def _current(self, request) -> dict | None:
        key = self._key(request)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return copy.deepcopy(self.objects[key].raw)

    def _store(self, request, body: dict) -> dict:
        key = self._key(request)
        body["metadata"]["resourceVersion"] = str(int(body["metadata"].get("resourceVersion", "0")) + 1)
        if key in self.objects:
            self.objects[key].create(body)  # a new version in its history, replacing the last
        else:
            self.objects[key] = body
        return body

    def _apply(self, request) -> dict:
        manager = request.params.get("fieldManager")
        if not manager:
            raise KubernetesError(400, "BadRequest", "PATCH with apply-patch needs a fieldManager")
        force = request.params.get("force") == "true"
        applied = json.loads(request.text)
        current = self._current(request) or {
            "apiVersion": applied["apiVersion"], "kind": applied["kind"],
            "metadata": {"name": request.name, "namespace": request.namespace, "managedFields": []}}
        entries = current["metadata"].setdefault("managedFields", [])
        declared = _leaves(applied)
        conflicts = []
        for entry in entries:
            if entry["manager"] == manager and entry["operation"] == "Apply":
                continue
            held = _paths(entry["fieldsV1"])
            for path, value in declared.items():
                if path in held and _get(current, path) != value:
                    conflicts.append((entry, path))
        if conflicts and not force:
            raise KubernetesError(409, "Conflict", f"Apply failed with {len(conflicts)} conflict(s)", {
                "causes": [{"reason": "FieldManagerConflict", "field": "." + ".".join(path),
                            "message": f'conflict with "{entry["manager"]}"'} for entry, path in conflicts]})
        for entry, path in conflicts:  # forced: the applier takes them
            entry["fieldsV1"] = _fields(_paths(entry["fieldsV1"]) - {path})
        mine = next((e for e in entries if e["manager"] == manager and e["operation"] == "Apply"), None)
        before = _paths(mine["fieldsV1"]) if mine else set()
        others = set().union(*[_paths(e["fieldsV1"]) for e in entries if e is not mine])
        for path in before - set(declared) - others:
            _remove(current, path)
        for path, value in declared.items():
            _set(current, path, value)
        if mine is None:
            mine = {"manager": manager, "operation": "Apply"}
            entries.append(mine)
        mine.update(apiVersion=applied["apiVersion"], fieldsType="FieldsV1", fieldsV1=_fields(set(declared)),
                    time=datetime.now(UTC).isoformat())
        current["metadata"]["managedFields"] = [e for e in entries if e["fieldsV1"]]
        return self._store(request, current)

    def _update(self, request) -> dict:
        current = self._current(request)
        if current is None:
            raise KubernetesError(404, "NotFound", f"{request.name} not found")
        manager = request.params.get("fieldManager", "kubectl-edit")
        changed = {path for path, value in _leaves(request.data or {}).items() if _get(current, path) != value}
        for path, value in _leaves(request.data or {}).items():
            _set(current, path, value)
        entries = current["metadata"].setdefault("managedFields", [])
        for entry in entries:
            entry["fieldsV1"] = _fields(_paths(entry["fieldsV1"]) - changed)
        mine = next((e for e in entries if e["manager"] == manager and e["operation"] == "Update"), None)
        if mine is None:
            mine = {"manager": manager, "operation": "Update", "apiVersion": current["apiVersion"],
                    "fieldsType": "FieldsV1", "fieldsV1": {}}
            entries.append(mine)
        mine["fieldsV1"] = _fields(_paths(mine["fieldsV1"]) | changed)
        current["metadata"]["managedFields"] = [e for e in entries if e["fieldsV1"]]
        return self._store(request, current)


class KubeApi:
    """The emulator on a loopback port, with the three kinds declared (or not: a cluster without
    the gateway's CRDs) in `namespace`."""

    def __init__(self, kinds: dict[str, str]) -> None:
        self.emulator = ApplyingEmulator()
        for declared, kind in kinds.items():
            self.emulator.resources[declared] = {"kind": kind, "namespaced": True,
                                                 "verbs": ["get", "list", "patch", "delete"]}
        self.port = free_port()
        self._server: Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> KubeApi:
        await self.emulator.__aenter__()
        self._server = Server(self.emulator, port=self.port)
        await self._server.__aenter__()
        return self

    async def __aexit__(self, *exc) -> None:
        if self._server is not None:
            await self._server.__aexit__(None, None, None)
        await self.emulator.__aexit__(*exc)

    def objects(self, group: str, version: str, plural: str, namespace: str) -> dict[str, dict]:
        """name -> the object as stored, of one kind."""
        wanted = resource(group, version, plural)
        return {name: obj.raw for (res, ns, name), obj in self.emulator.objects.items()
                if res == wanted and ns == namespace and not obj.deleted}

    def writes(self) -> int:
        """PATCH and DELETE requests so far."""
        return sum(1 for r in self.emulator if r.method in ("PATCH", "DELETE"))
