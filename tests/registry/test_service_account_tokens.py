"""Pods' projected service-account tokens at a registry process that admits them: the issuer's
keys through OIDC discovery on a real HTTP server, a rotation followed, a pod of a mapped service
account made a node of that pool only, and every other token refused with 401 (a pod name that is
no node id with 403), saying why, and nothing stored."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from joserfc.jwk import OctKey
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tests.conftest import OTHER_POOL, SERVING_POOL
from tests.support.asserts import assert_refused
from tests.support.k8s_issuer import Issuer, ec_key, mint, pod_claims, rsa_key, start_k8s_registry, unsigned
from registry.tables import AuditEvent, NodeStatus, Pool

SERVING_ACCOUNT = "loraplane-serving"
LIMITS = {"max_loras": 2, "max_cpu_loras": 4, "max_lora_rank": 16}
KEYS = {"k1": rsa_key("k1"), "k2": rsa_key("k2"), "e1": ec_key("e1"), "stranger": rsa_key("k3")}


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    served = Issuer(KEYS["k1"], KEYS["e1"])
    yield served
    served.close()


@pytest.fixture(scope="module")
def k8s_registry(service_dir, registry, tokens, issuer):
    server = start_k8s_registry(service_dir / "registry-k8s", registry, issuer.url, {
        f"llm/{SERVING_ACCOUNT}": SERVING_POOL, "llm/loraplane-other": OTHER_POOL})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def signer() -> dict:
    """The key pods' tokens are signed with now: the rotation test moves it to k2."""
    return {"key": KEYS["k1"]}


def pod_token(issuer: Issuer, signer: dict, **claims) -> str:
    return mint(signer["key"], pod_claims(issuer.url, service_account=SERVING_ACCOUNT, **claims))


def as_pod(k8s_registry, token: str) -> httpx.Client:
    return httpx.Client(base_url=k8s_registry.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def report(client: httpx.Client, pool: str, node_id: str) -> httpx.Response:
    return client.put(f"/v1/pools/{pool}/nodes/{node_id}/status",
                      json={"generation": 0, "loaded": [], "failures": [], "limits": LIMITS})


def stored(engine, node_id: str) -> tuple[list[str], int]:
    """The pools holding a report of `node_id`, and how many audit events there are."""
    with Session(engine) as session:
        pools = session.scalars(select(Pool.name).join(NodeStatus, NodeStatus.pool_id == Pool.id)
                                .where(NodeStatus.node_id == node_id)).all()
        return sorted(pools), session.scalar(select(func.count()).select_from(AuditEvent)) or 0


def test_a_rotated_in_key_is_fetched_once_and_a_dropped_one_no_longer_admits(k8s_registry, issuer, signer):
    """First in the module: nothing has asked the issuer for its keys again yet."""
    with as_pod(k8s_registry, pod_token(issuer, signer, pod="rotating-0")) as before:
        assert before.get("/v1/whoami").status_code == 200
    fetched = issuer.key_fetches()
    assert issuer.requests["/.well-known/openid-configuration"] == 1

    issuer.keys = [KEYS["k2"], KEYS["e1"]]  # the cluster rotated: k2 signs, k1 is gone
    old = pod_token(issuer, signer, pod="rotating-0")
    signer["key"] = KEYS["k2"]
    with as_pod(k8s_registry, pod_token(issuer, signer, pod="rotating-0")) as after:
        assert after.get("/v1/whoami").json()["instance_id"] == "rotating-0"
    assert issuer.key_fetches() == fetched + 1

    with as_pod(k8s_registry, old) as stale:
        assert_refused(stale.get("/v1/whoami"), 401, "k8s_token_unknown_key",
                       "the service-account token is refused: it is signed by key 'k1', which the "
                       "cluster issuer does not publish")
    # A made-up key id right after a refetch asks the issuer nothing: at most one per 10 s.
    made_up_key = mint(KEYS["stranger"], pod_claims(issuer.url, service_account=SERVING_ACCOUNT))
    with as_pod(k8s_registry, made_up_key) as made_up:
        assert made_up.get("/v1/whoami").status_code == 401
    assert issuer.key_fetches() == fetched + 1


@pytest.mark.parametrize("key", ["rsa", "ec"])
def test_a_pods_token_is_a_node_of_its_service_accounts_pool(k8s_registry, issuer, signer, engine, key):
    pod = f"node-{key}-0"
    token = mint(signer["key"] if key == "rsa" else KEYS["e1"],
                 pod_claims(issuer.url, service_account=SERVING_ACCOUNT, pod=pod, pod_uid="0f1e2d3c-aaaa"))
    with as_pod(k8s_registry, token) as node:
        assert node.get("/v1/whoami").json() == {
            "subject": f"system:serviceaccount:llm:{SERVING_ACCOUNT}", "role": "node", "tenant": None,
            "pool": SERVING_POOL, "instance_id": pod, "tier": None, "identity_id": 0, "token_id": 0}
        answered = report(node, SERVING_POOL, pod)
        assert answered.status_code == 200, answered.text
        assert answered.json()["node_id"] == pod
        active = node.get(f"/v1/pools/{SERVING_POOL}/active-set")
        assert active.status_code == 200 and active.json()["pool"] == SERVING_POOL
    assert stored(engine, pod)[0] == [SERVING_POOL]


def test_a_token_of_pool_a_is_refused_on_every_route_of_pool_b(k8s_registry, issuer, signer, engine):
    pod = "replayed-0"
    before = stored(engine, pod)
    with as_pod(k8s_registry, pod_token(issuer, signer, pod=pod)) as node:
        assert_refused(report(node, OTHER_POOL, pod), 403, "forbidden",
                       f"this node token belongs to pool '{SERVING_POOL}', not '{OTHER_POOL}'")
        assert_refused(node.get(f"/v1/pools/{OTHER_POOL}/active-set"), 403, "forbidden",
                       f"this node token belongs to pool '{SERVING_POOL}', not '{OTHER_POOL}'")
        assert_refused(node.get(f"/v1/pools/{OTHER_POOL}/active-set", params={"wait": 1}), 403, "forbidden",
                       f"this node token belongs to pool '{SERVING_POOL}', not '{OTHER_POOL}'")
        assert_refused(node.get(f"/v1/pools/{OTHER_POOL}/rollout"), 403, "forbidden",
                       "role 'node' may not do this")
        # Nor may it speak for another pod of its own pool: the node id is its pod's name.
        assert_refused(report(node, SERVING_POOL, "node-rsa-0"), 403, "forbidden",
                       f"this node token is bound to node '{pod}', not 'node-rsa-0'")
    assert stored(engine, pod) == before
    assert stored(engine, pod)[0] == []


def refusals(issuer_url: str, key) -> dict[str, tuple[str, int, str, str]]:
    """name -> (token, status, code, message) of every token that must be refused."""
    def claims(**given):
        return pod_claims(issuer_url, **{"service_account": SERVING_ACCOUNT, "pod": "refused-0", **given})

    expired = claims(issued_at=int(time.time()) - 3700)
    return {
        "unmapped service account": (
            mint(key, claims(service_account="default")), 401, "k8s_token_unmapped_service_account",
            "the service-account token is refused: service account llm/default is not mapped to a pool"),
        "another namespace": (
            mint(key, claims(namespace="elsewhere")), 401, "k8s_token_unmapped_service_account",
            f"the service-account token is refused: service account elsewhere/{SERVING_ACCOUNT} is not "
            "mapped to a pool"),
        "another issuer": (
            mint(key, {**claims(), "iss": "https://kubernetes.other.example"}), 401, "k8s_token_wrong_issuer",
            "the service-account token is refused: it was issued by 'https://kubernetes.other.example', "
            f"not by the cluster issuer '{issuer_url}'"),
        "another audience": (
            mint(key, claims(audience=["https://kubernetes.default.svc"])), 401, "k8s_token_wrong_audience",
            "the service-account token is refused: it is for audience 'https://kubernetes.default.svc', "
            "not 'loraplane'"),
        "expired": (
            mint(key, expired), 401, "k8s_token_expired",
            "the service-account token is refused: it expired at "
            f"{datetime.fromtimestamp(expired['exp'], UTC).isoformat()}"),
        "not yet valid": (
            mint(key, {**claims(), "nbf": int(time.time()) + 600}), 401, "k8s_token_not_yet_valid",
            "the service-account token is refused: it is not valid yet (nbf is in the future)"),
        "long-lived": (
            mint(key, claims(lifetime_s=365 * 86400)), 401, "k8s_token_too_long_lived",
            "the service-account token is refused: it is valid for 31536000 s, longer than "
            "LORAPLANE_K8S_MAX_TOKEN_LIFETIME_S (7200 s): not a short-lived token"),
        "a key not in the JWKS": (
            mint(KEYS["stranger"], claims()), 401, "k8s_token_unknown_key",
            "the service-account token is refused: it is signed by key 'k3', which the cluster issuer "
            "does not publish"),
        "a published key id, another key": (
            mint(KEYS["stranger"], claims(), kid=key.kid), 401, "k8s_token_bad_signature",
            f"the service-account token is refused: its signature does not verify with the cluster "
            f"issuer's key '{key.kid}'"),
        "alg none": (
            unsigned(claims(), key.kid), 401, "k8s_token_bad_algorithm",
            "the service-account token is refused: it is signed with alg 'none'; only RS256 and ES256 "
            "are accepted"),
        "HS256 with the public key's id": (
            mint(OctKey.generate_key(256), claims(), alg="HS256", kid=key.kid), 401, "k8s_token_bad_algorithm",
            "the service-account token is refused: it is signed with alg 'HS256'; only RS256 and ES256 "
            "are accepted"),
        "bound to no pod": (
            mint(key, claims(pod=None)), 401, "k8s_token_not_a_pod_token",
            "the service-account token is refused: it is bound to no pod"),
        "a pod name that is no node id": (
            mint(key, claims(pod="web.refused-0")), 403, "pod_name_not_a_node_id",
            f"pod 'web.refused-0' of service account llm/{SERVING_ACCOUNT} cannot be a node: its name is "
            "not a node id (1-64 lowercase letters, digits, '-' and '_', starting and ending with a "
            "letter or digit), and it is not rewritten into one"),
    }


REFUSALS = list(refusals("https://example.invalid", KEYS["k1"]))


@pytest.mark.parametrize("case", REFUSALS)
def test_a_token_that_does_not_hold_is_refused_saying_why_and_nothing_is_stored(
        k8s_registry, issuer, signer, engine, case):
    token, status, code, message = refusals(issuer.url, signer["key"])[case]
    before = {node_id: stored(engine, node_id) for node_id in ("refused-0", "web.refused-0")}
    with as_pod(k8s_registry, token) as node:
        assert_refused(report(node, SERVING_POOL, "refused-0"), status, code, message)
        assert_refused(node.get(f"/v1/pools/{SERVING_POOL}/active-set"), status, code, message)
        assert_refused(node.get("/v1/whoami"), status, code, message)
    assert {node_id: stored(engine, node_id) for node_id in before} == before
    assert before["refused-0"][0] == [] and before["web.refused-0"][0] == []


def test_an_oversized_or_malformed_bearer_is_refused_before_any_parse(k8s_registry, issuer, signer):
    padded = pod_token(issuer, signer, pod="big-0") + "A" * 9000
    with as_pod(k8s_registry, padded) as node:
        assert_refused(node.get("/v1/whoami"), 401, "k8s_token_malformed",
                       "the service-account token is refused: it is not a compact JWT of at most 8 KiB")
    with as_pod(k8s_registry, "eyJhbGciOiJSUzI1NiJ9.e30.!!") as node:
        assert_refused(node.get("/v1/whoami"), 401, "k8s_token_malformed",
                       "the service-account token is refused: it is not a compact JWT of at most 8 KiB")


def test_without_an_issuer_a_pods_token_is_an_unknown_token(registry, issuer, signer, engine):
    """The suite's own registry has no LORAPLANE_K8S_ISSUER: such a token is like any other."""
    before = stored(engine, "plain-0")
    with as_pod(registry, pod_token(issuer, signer, pod="plain-0")) as node:
        assert_refused(report(node, SERVING_POOL, "plain-0"), 401, "unauthorized", "invalid or revoked token")
    assert stored(engine, "plain-0") == before


def test_refusals_and_acceptances_are_counted(k8s_registry, tokens):
    scrape = httpx.get(f"{k8s_registry.url}/metrics", headers={"Authorization": f"Bearer {tokens['scraper']}"})
    assert scrape.status_code == 200
    assert 'loraplane_k8s_token_checks_total{outcome="accepted"}' in scrape.text
    assert 'loraplane_k8s_token_checks_total{outcome="k8s_token_unknown_key"}' in scrape.text
    assert 'loraplane_k8s_key_fetches_total{outcome="fetched"}' in scrape.text


def test_no_token_reaches_the_log(k8s_registry, issuer, signer):
    token = pod_token(issuer, signer, pod="logged-0")
    with as_pod(k8s_registry, token) as node:
        assert node.get("/v1/whoami").status_code == 200
    with as_pod(k8s_registry, mint(KEYS["stranger"], pod_claims(issuer.url))) as node:
        assert node.get("/v1/whoami").status_code == 401
    log = k8s_registry.log.read_text()
    assert "which the cluster issuer does not publish (k8s_token_unknown_key)" in log  # logged, saying why
    assert "eyJ" not in log and token.split(".")[2] not in log


def test_a_token_checked_once_is_not_trusted_past_its_expiry(k8s_registry, issuer, signer):
    """The active set's token cache (LORAPLANE_AUTH_CACHE_S, 5 s) keeps no pod's token longer
    than the token holds: this one's last second (exp plus the 60 s leeway) is two seconds away."""
    expiring = pod_claims(issuer.url, service_account=SERVING_ACCOUNT, pod="expiring-0",
                          issued_at=int(time.time()) - 3600 - 58)
    with as_pod(k8s_registry, mint(signer["key"], expiring)) as node:
        assert node.get(f"/v1/pools/{SERVING_POOL}/active-set").status_code == 200
        time.sleep(max(0.0, expiring["exp"] + 61 - time.time()))
        assert_refused(node.get(f"/v1/pools/{SERVING_POOL}/active-set"), 401, "k8s_token_expired",
                       "the service-account token is refused: it expired at")
