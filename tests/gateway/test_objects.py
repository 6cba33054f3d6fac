"""Each pool's gateway objects are valid against their CRDs' schemas (tests/gateway/crd_schemas.py)
whatever the pool's name, aliases and settings, and say what loraplane's router would do with a
client's model name: production and canary split by the canary's weight, an alias by its name."""

from __future__ import annotations

import pytest

from registry.gateway.objects import GatewaySpec, object_name, pool_objects, rewrite_name
from registry.gateway_settings import EndpointPicker
from tests.gateway.crd_schemas import problems

pytestmark = pytest.mark.fast

LABELS = {"app.kubernetes.io/instance": "lp", "app.kubernetes.io/component": "pool-{pool}",
          "loraplane.dev/pool": "{pool}"}
SPEC = GatewaySpec(namespace="llm", instance="lp-loraplane", pod_labels=LABELS)


def entry(served: str, *aliases: tuple[str, int]) -> dict:
    tenant, rest = served.split("/")
    return {"served_name": served, "tenant": tenant, "adapter": rest.split("@")[0],
            "aliases": [{"alias": alias, "weight": weight} for alias, weight in aliases]}


CANARY = [entry("acme/support@1", ("production", 90)), entry("acme/support@2", ("canary", 10)),
          entry("acme/support@3", ("staging", 0)), entry("globex/chat@4", ("production", 100)),
          entry("acme/old@1")]  # retiring: no alias, reached only as acme/old@1


def by_kind(items: list[dict]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for item in items:
        found.setdefault(item["kind"], []).append(item)
    return found


def rewrites(items: list[dict]) -> dict[str, list[tuple[str, int]]]:
    """model name -> [(served name, weight)] of each InferenceModelRewrite."""
    found = {}
    for item in by_kind(items)["InferenceModelRewrite"]:
        (rule,) = item["spec"]["rules"]
        (match,) = rule["matches"]
        found[match["model"]["value"]] = [(t["modelRewrite"], t["weight"]) for t in rule["targets"]]
    return found


@pytest.mark.parametrize("spec", [
    SPEC,
    GatewaySpec(),  # the defaults
    GatewaySpec(namespace="gateway", instance="a" * 52, llmd_api_version="inference.networking.x-k8s.io/v1alpha2",
                target_port=8443, pod_labels={"app": "vllm-{pool}"},
                endpoint_picker=EndpointPicker(name="{pool}-picker", port=9003, failureMode="FailOpen")),
], ids=["chart", "defaults", "custom"])
@pytest.mark.parametrize("pool", ["chat", "chat_2", "p" * 58, "a-b"])
def test_every_object_is_valid_for_its_crd(spec, pool):
    items = pool_objects(spec, pool, CANARY)
    assert [p for item in items for p in problems(item, spec.llmd_api_version)] == []
    assert sorted(by_kind(items)) == ["InferenceModelRewrite", "InferenceObjective", "InferencePool"]
    for item in items:
        assert item["metadata"]["namespace"] == spec.namespace
        assert item["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "loraplane",
                                              "loraplane.dev/registry": spec.instance}
        assert item["metadata"]["annotations"]["loraplane.dev/pool"] == pool
        assert len(item["metadata"]["name"]) <= 63
    assert len({(i["kind"], i["metadata"]["name"]) for i in items}) == len(items)


def test_the_schemas_refuse_what_the_api_server_would():
    """The schemas are not vacuous: each refuses an object the CRD refuses."""
    pool, objective, rewrite = (pool_objects(SPEC, "chat", CANARY)[i] for i in (0, 1, 3))
    broken = [
        ({**pool, "spec": {**pool["spec"], "targetPorts": []}}, "should be non-empty"),
        ({**pool, "spec": {**pool["spec"], "endpointPickerRef": {"name": "epp"}}}, "is not valid under any"),
        ({**pool, "spec": {**pool["spec"], "selector": {"matchLabels": {"a": "b/c"}}}}, "does not match"),
        ({**objective, "spec": {"priority": "high", "poolRef": objective["spec"]["poolRef"]}},
         "is not of type 'integer'"),
        ({**objective, "spec": {"priority": 1}}, "'poolRef' is a required property"),
        ({**rewrite, "spec": {**rewrite["spec"], "rules": [{"targets": [{"modelRewrite": "a@1", "weight": 0}]}]}},
         "less than the minimum"),
        ({**rewrite, "spec": {**rewrite["spec"], "rules": [{"targets": [{"modelRewrite": "a@1", "weight": 2},
                                                                        {"modelRewrite": "a@2"}]}]}},
         "is not valid under any"),
        ({**rewrite, "spec": {**rewrite["spec"], "rules": [{"matches": [{"model": {"type": "Prefix", "value": "a"}}],
                                                            "targets": [{"modelRewrite": "a@1"}]}]}},
         "is not one of"),
        ({**rewrite, "metadata": {**rewrite["metadata"], "name": "Acme/Support"}}, "does not match"),
    ]
    for item, why in broken:
        found = problems(item)
        assert found and any(why in p for p in found), (why, found)


def test_model_names_mean_what_they_mean_to_the_router():
    items = pool_objects(SPEC, "chat", CANARY)
    assert rewrites(items) == {
        "acme/support": [("acme/support@1", 90), ("acme/support@2", 10)],
        "acme/support:production": [("acme/support@1", 100)],
        "acme/support:canary": [("acme/support@2", 100)],
        "acme/support:staging": [("acme/support@3", 100)],
        "globex/chat": [("globex/chat@4", 100)],
        "globex/chat:production": [("globex/chat@4", 100)],
    }  # served names (acme/old@1) need no rewrite: vLLM knows them
    pool = by_kind(items)["InferencePool"][0]
    assert pool["metadata"]["name"] == "lp-loraplane-chat"
    assert pool["spec"] == {
        "selector": {"matchLabels": {"app.kubernetes.io/instance": "lp", "app.kubernetes.io/component": "pool-chat",
                                     "loraplane.dev/pool": "chat"}},
        "targetPorts": [{"number": 8000}],
        "endpointPickerRef": {"group": "", "kind": "Service", "name": "lp-loraplane-chat-epp", "port": {"number": 9002},
                              "failureMode": "FailClose"}}
    objectives = {o["metadata"]["name"]: o["spec"] for o in by_kind(items)["InferenceObjective"]}
    reference = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "lp-loraplane-chat"}
    assert objectives == {"lp-loraplane-chat-interactive": {"priority": 10, "poolRef": reference},
                          "lp-loraplane-chat-batch": {"priority": -10, "poolRef": reference}}
    for item in by_kind(items)["InferenceModelRewrite"]:
        assert item["spec"]["poolRef"] == reference
        model = item["spec"]["rules"][0]["matches"][0]["model"]["value"]
        assert item["metadata"]["annotations"]["loraplane.dev/model"] == model


def test_a_canary_at_full_weight_takes_the_whole_bare_name():
    items = pool_objects(SPEC, "chat", [entry("acme/a@1", ("production", 0)), entry("acme/a@2", ("canary", 100))])
    assert rewrites(items)["acme/a"] == [("acme/a@2", 100)]
    assert problems(by_kind(items)["InferenceModelRewrite"][0]) == []


def test_names_never_collide():
    assert object_name("lp", "chat") == "lp-chat"
    assert object_name("lp", "chat_2") != object_name("lp", "chat-2")  # '_' is not allowed in names
    assert len(object_name("lp", "p" * 64)) == 63


def test_a_pool_whose_name_cannot_label_its_pods_is_refused_naming_it():
    from registry.errors import Unprocessable

    with pytest.raises(Unprocessable, match="pool-pppp.*is not a label value"):
        pool_objects(SPEC, "p" * 64, CANARY)
    # `a/b:c` and `a/b-c` read alike once '/' and ':' are dashes; the digest tells them apart.
    assert rewrite_name("lp", "chat", "acme/b:c") != rewrite_name("lp", "chat", "acme/b-c")
    assert rewrite_name("lp", "chat", "acme/b") != rewrite_name("lp", "code", "acme/b")
