"""The reconciler keeps a pool's gateway objects in step with its active set, on a Kubernetes API
(kmock's emulator with server-side apply, tests/gateway/kube_api.py: no API server runs here):
it creates them, updates them as a canary's weight changes, takes back a field someone edited,
deletes the rewrite of an alias that is gone, reports (and never overwrites) another manager's
applied fields unless told to, never touches an object without its labels, and writes nothing in
a round where nothing changed. The pools, promotions and aliases are the registry's own, on the
session's Postgres."""

from __future__ import annotations

import asyncio
import copy

import pytest
from lightkube.types import PatchType

from devkit.units_of_work import unit_of_work
from registry.gateway import service
from registry.gateway.objects import GatewaySpec
from registry.gateway.service import Desired
from tests.gateway.conftest import POOLS
from tests.gateway.crd_schemas import problems
from tests.gateway.kube_api import KubeApi
from tests.support.promotions import promote
from workers import gateway_sync
from workers.gateway_sync import Follower, GatewaySync, MissingKind, api_client

NAMESPACE = "llm"
SPEC = GatewaySpec(namespace=NAMESPACE, instance="gw-test",
                   pod_labels={"app.kubernetes.io/component": "pool-{pool}", "loraplane.dev/pool": "{pool}"})
KINDS = {"inference.networking.k8s.io/v1/inferencepools": "InferencePool",
         "llm-d.ai/v1alpha2/inferencemodelrewrites": "InferenceModelRewrite",
         "llm-d.ai/v1alpha2/inferenceobjectives": "InferenceObjective"}
POOLS_API = ("inference.networking.k8s.io", "v1", "inferencepools")
REWRITES_API = ("llm-d.ai", "v1alpha2", "inferencemodelrewrites")
OBJECTIVES_API = ("llm-d.ai", "v1alpha2", "inferenceobjectives")


def desired(engine, pool: str) -> Desired:
    with unit_of_work(engine) as session:
        return service.desired(session, SPEC, pool)


def rewrites(api: KubeApi) -> dict[str, list[tuple[str, int]]]:
    """model name -> [(served name, weight)], as the cluster holds them."""
    found = {}
    for item in api.objects(*REWRITES_API, NAMESPACE).values():
        rule = item["spec"]["rules"][0]
        found[rule["matches"][0]["model"]["value"]] = [(t["modelRewrite"], t["weight"]) for t in rule["targets"]]
    return found


def run(scenario) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_objects_follow_promotions_and_canaries(engine, promote_to, uploader, admin):
    pool = POOLS[2]
    promote_to(pool, "gw-support")
    promote_to(pool, "gw-support", "canary", 10)

    async def scenario() -> None:
        async with KubeApi(KINDS) as api:
            sync = GatewaySync(api_client(api.url), SPEC)

            async def reconcile():
                return await asyncio.to_thread(sync.reconcile, desired(engine, pool))

            first = await reconcile()
            assert len(first.created) == 6 and not (first.updated or first.deleted or first.conflicts or first.failed)
            assert rewrites(api) == {"acme/gw-support": [("acme/gw-support@1", 90), ("acme/gw-support@2", 10)],
                                     "acme/gw-support:production": [("acme/gw-support@1", 100)],
                                     "acme/gw-support:canary": [("acme/gw-support@2", 100)]}
            stored = [item for kind in (POOLS_API, REWRITES_API, OBJECTIVES_API)
                      for item in api.objects(*kind, NAMESPACE).values()]
            assert [p for item in stored for p in problems(_declared(item))] == []
            for item in stored:
                (entry,) = item["metadata"]["managedFields"]
                assert (entry["manager"], entry["operation"]) == ("loraplane", "Apply")

            # Nothing changed: one listing per kind, nothing written.
            writes = api.writes()
            again = await reconcile()
            assert again.unchanged == 6 and again.writes == 0 and api.writes() == writes

            # A new canary at another weight: the bare name's split and the canary's target change.
            third = await asyncio.to_thread(promote_to, pool, "gw-support", "canary", 30)
            stepped = await reconcile()
            changed = ("acme/gw-support", "acme/gw-support:canary")
            assert sorted(stepped.updated) == sorted(
                f"InferenceModelRewrite/{name}" for name, item in api.objects(*REWRITES_API, NAMESPACE).items()
                if item["metadata"]["annotations"]["loraplane.dev/model"] in changed)
            assert rewrites(api)["acme/gw-support"] == [("acme/gw-support@1", 70), ("acme/gw-support@3", 30)]
            assert not stepped.created and not stepped.deleted

            # The canary's version promoted to production: the canary alias is gone, and so is its rewrite.
            await asyncio.to_thread(promote, uploader, admin, pool, third)
            after = await reconcile()
            assert [d.split("/")[0] for d in after.deleted] == ["InferenceModelRewrite"]
            assert rewrites(api) == {"acme/gw-support": [("acme/gw-support@3", 100)],
                                     "acme/gw-support:production": [("acme/gw-support@3", 100)]}

    run(scenario)


def test_drift_is_corrected_and_another_applier_is_reported_not_overwritten(engine, promote_to):
    pool = POOLS[1]
    promote_to(pool, "gw-coder")

    async def scenario() -> None:
        async with KubeApi(KINDS) as api:
            client = api_client(api.url)
            sync = GatewaySync(client, SPEC)
            wanted = desired(engine, pool)
            await asyncio.to_thread(sync.reconcile, wanted)
            inference_pool = next(iter(api.objects(*POOLS_API, NAMESPACE)))
            resource = sync.resources["InferencePool"]

            # Someone edits a field loraplane declares (kubectl edit: an update, not an apply).
            edit = {"spec": {"targetPorts": [{"number": 9000}]}}
            await asyncio.to_thread(client.patch, resource, inference_pool, edit, namespace=NAMESPACE,
                                    patch_type=PatchType.MERGE, field_manager="kubectl-edit")
            stored = api.objects(*POOLS_API, NAMESPACE)[inference_pool]
            managers = {e["manager"] for e in stored["metadata"]["managedFields"]}
            assert managers == {"loraplane", "kubectl-edit"}
            corrected = await asyncio.to_thread(sync.reconcile, wanted)
            assert corrected.corrected == [f"InferencePool/{inference_pool}"] and not corrected.conflicts
            assert api.objects(*POOLS_API, NAMESPACE)[inference_pool]["spec"]["targetPorts"] == [{"number": 8000}]

            # Another manager applies another value of a field loraplane declares, forcing it.
            theirs = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
                      "metadata": {"name": inference_pool, "namespace": NAMESPACE},
                      "spec": {"endpointPickerRef": {"failureMode": "FailOpen"}}}
            await asyncio.to_thread(client.patch, resource, inference_pool, theirs, namespace=NAMESPACE,
                                    patch_type=PatchType.APPLY, field_manager="gitops", force=True)
            reported = await asyncio.to_thread(sync.reconcile, wanted)
            assert list(reported.conflicts) == [f"InferencePool/{inference_pool}"]
            assert "gitops" in reported.conflicts[f"InferencePool/{inference_pool}"] and reported.writes == 0
            picker = api.objects(*POOLS_API, NAMESPACE)[inference_pool]["spec"]["endpointPickerRef"]
            assert picker["failureMode"] == "FailOpen"

            # With LORAPLANE_GATEWAY_FORCE_CONFLICTS, loraplane takes it back.
            forced = await asyncio.to_thread(GatewaySync(client, SPEC, force_conflicts=True).reconcile, wanted)
            assert forced.corrected == [f"InferencePool/{inference_pool}"]
            picker = api.objects(*POOLS_API, NAMESPACE)[inference_pool]["spec"]["endpointPickerRef"]
            assert picker["failureMode"] == "FailClose"

    run(scenario)


def test_only_loraplane_s_own_objects_are_changed_or_deleted(engine, promote_to):
    pool = POOLS[1]
    promote_to(pool, "gw-labels")
    wanted = desired(engine, pool)
    objective = next(o for o in wanted.objects if o["kind"] == "InferenceObjective")
    foreign_rewrite = {"apiVersion": "llm-d.ai/v1alpha2", "kind": "InferenceModelRewrite",
                       "metadata": {"name": "someone-elses", "namespace": NAMESPACE, "labels": {"team": "search"}},
                       "spec": {"poolRef": {"name": "x"}, "rules": []}}
    other_instance = copy.deepcopy(foreign_rewrite)
    other_instance["metadata"].update(name="another-registrys", labels={
        "app.kubernetes.io/managed-by": "loraplane", "loraplane.dev/registry": "another"})
    squatter = {**copy.deepcopy(objective), "metadata": {"name": objective["metadata"]["name"], "namespace": NAMESPACE}}

    async def scenario() -> None:
        async with KubeApi(KINDS) as api:
            for plural, item in (("inferencemodelrewrites", foreign_rewrite),
                                 ("inferencemodelrewrites", other_instance), ("inferenceobjectives", squatter)):
                api.emulator.objects[f"llm-d.ai/v1alpha2/{plural}", NAMESPACE, item["metadata"]["name"]] = item
            sync = GatewaySync(api_client(api.url), SPEC)
            done = await asyncio.to_thread(sync.reconcile, wanted)
            key = f"InferenceObjective/{objective['metadata']['name']}"
            assert "without loraplane's labels" in done.conflicts[key] and not done.deleted
            assert api.objects(*OBJECTIVES_API, NAMESPACE)[objective["metadata"]["name"]] == squatter  # untouched

            # The pool is gone from what the registry wants: only its own objects go.
            emptied = await asyncio.to_thread(sync.reconcile, Desired())
            assert emptied.deleted and all("someone-elses" not in d and "another-registrys" not in d
                                           for d in emptied.deleted)
            left = set(api.objects(*REWRITES_API, NAMESPACE)) | set(api.objects(*OBJECTIVES_API, NAMESPACE))
            assert left == {"someone-elses", "another-registrys", objective["metadata"]["name"]}
            assert api.objects(*POOLS_API, NAMESPACE) == {}

            # A pool whose set could not be read keeps its objects.
            await asyncio.to_thread(sync.reconcile, wanted)
            kept = await asyncio.to_thread(sync.reconcile, Desired(unread={pool: "does not verify"}))
            assert kept.deleted == [] and api.objects(*POOLS_API, NAMESPACE)

    run(scenario)


def test_an_unchanged_registry_is_read_once(engine, promote_to, monkeypatch):
    """Each round asks the database for the pools' generations; the active sets are read again only
    when one changed (here only this test's pool is read, whatever other tests left in theirs)."""
    promote_to(POOLS[0], "gw-cheap")
    reads, real = [], service.desired

    def read(session, spec):
        reads.append(spec)
        return real(session, spec, POOLS[0])

    monkeypatch.setattr(gateway_sync.service, "desired", read)
    follower = Follower(SPEC)
    with unit_of_work(engine) as session:
        first = follower.desired(session)
    with unit_of_work(engine) as session:
        assert follower.desired(session) is first and len(reads) == 1
    promote_to(POOLS[0], "gw-cheap")
    with unit_of_work(engine) as session:
        assert follower.desired(session) is not first and len(reads) == 2


def test_a_cluster_without_the_crds_fails_the_round_saying_so(engine, promote_to):
    pool = POOLS[0]
    promote_to(pool, "gw-nocrd")

    async def scenario() -> None:
        async with KubeApi({}) as api:
            sync = GatewaySync(api_client(api.url), SPEC)
            with pytest.raises(MissingKind, match=r"does not serve InferencePool \(inference.networking.k8s.io/v1"):
                await asyncio.to_thread(sync.reconcile, desired(engine, pool))

    run(scenario)


def _declared(item: dict) -> dict:
    """The object without what the API server adds (managedFields, resourceVersion)."""
    metadata = {k: v for k, v in item["metadata"].items() if k not in ("managedFields", "resourceVersion")}
    return {**item, "metadata": metadata}
