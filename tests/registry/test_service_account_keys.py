"""Where the cluster issuer's keys come from, checked in this process as a registry checks a
pod's token: a JWKS file (a ConfigMap) read again when it changes, a JWKS URL on a real HTTP
server, each bounded; and LORAPLANE_K8S_* settings that could never admit a node, refused as the
process starts."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from joserfc.jwk import RSAKey
from pydantic import ValidationError

from registry.auth.principal import Role
from registry.auth.service_accounts import pod_tokens
from registry.auth.service_accounts.claims import TokenRefused
from registry.auth.service_accounts.issuer_keys import IssuerKeysUnavailable
from registry.settings import RegistrySettings, get_settings
from tests.support.k8s_issuer import Issuer, jwks, mint, pod_claims, rsa_key

pytestmark = pytest.mark.fast
ISSUER = "https://kubernetes.default.svc.cluster.local"
ACCOUNTS = {"llm/loraplane-pool-a": "pool-a", "llm/loraplane-pool-b": "pool-b"}


@pytest.fixture
def configure() -> Iterator[Callable[..., None]]:
    """Set LORAPLANE_K8S_* in this process as a registry's environment would."""
    saved = dict(os.environ)

    def set_(**settings: str) -> None:
        os.environ.update({"LORAPLANE_K8S_ISSUER": ISSUER,
                           "LORAPLANE_K8S_SERVICE_ACCOUNTS": json.dumps(ACCOUNTS), **settings})
        get_settings.cache_clear()

    yield set_
    os.environ.clear()
    os.environ.update(saved)
    get_settings.cache_clear()


def claims(issuer: str = ISSUER, **given):
    return pod_claims(issuer, **{"service_account": "loraplane-pool-b", "pod": "node-b-1", **given})


def test_a_jwks_file_is_read_again_when_the_configmap_changes(configure, tmp_path: Path):
    old, new = rsa_key("file-old"), rsa_key("file-new")
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps(jwks(old)))
    configure(LORAPLANE_K8S_JWKS_FILE=str(keys))

    principal = pod_tokens.principal(mint(old, claims(pod_uid="1234-abcd")))
    assert (principal.role, principal.pool, principal.instance_id, principal.pod_uid) == \
        (Role.NODE, "pool-b", "node-b-1", "1234-abcd")
    assert principal.label == ("system:serviceaccount:llm:loraplane-pool-b (node@pool pool-b, pod node-b-1, "
                               "uid 1234-abcd)")

    staged = tmp_path / "jwks.json.new"  # as the kubelet swaps a ConfigMap's files: whole, at once
    staged.write_text(json.dumps(jwks(new)))
    staged.replace(keys)
    assert pod_tokens.principal(mint(new, claims())).instance_id == "node-b-1"
    with pytest.raises(TokenRefused) as refused:
        pod_tokens.principal(mint(old, claims()))
    assert (refused.value.status, refused.value.code, refused.value.message) == (
        401, "k8s_token_unknown_key",
        "the service-account token is refused: it is signed by key 'file-old', which the cluster "
        "issuer does not publish")


@pytest.mark.filterwarnings("ignore:Key size should be")  # the weak key made here, on purpose
def test_a_file_too_large_or_not_a_key_set_is_refused_before_parsing(configure, tmp_path: Path):
    large = tmp_path / "large.json"
    large.write_text(json.dumps({"keys": [], "padding": "x" * (256 * 1024)}))
    configure(LORAPLANE_K8S_JWKS_FILE=str(large))
    with pytest.raises(IssuerKeysUnavailable) as unavailable:
        pod_tokens.principal(mint(rsa_key("any"), claims()))
    assert (unavailable.value.status, unavailable.value.message) == (
        503, "LORAPLANE_K8S_JWKS_FILE is larger than 256 KiB")

    weak = tmp_path / "weak.json"
    small = RSAKey.generate_key(1024, parameters={"kid": "weak"})
    weak.write_text(json.dumps({"keys": [small.as_dict(private=False), {"kty": "oct", "kid": "x", "k": "AAAA"}]}))
    configure(LORAPLANE_K8S_JWKS_FILE=str(weak))
    with pytest.raises(TokenRefused) as refused:  # a 1024-bit RSA key and a shared secret are no keys
        pod_tokens.principal(mint(small, claims()))
    assert (refused.value.status, refused.value.code) == (401, "k8s_token_unknown_key")


def test_a_jwks_url_is_fetched_without_discovery(configure):
    key = rsa_key("url-1")
    issuer = Issuer(key)
    try:
        configure(LORAPLANE_K8S_ISSUER=issuer.url, LORAPLANE_K8S_JWKS_URL=f"{issuer.url}/openid/v1/jwks")
        assert pod_tokens.principal(mint(key, claims(issuer.url))).pool == "pool-b"
        assert pod_tokens.principal(mint(key, claims(issuer.url, pod="node-b-2"))).instance_id == "node-b-2"
        assert issuer.requests == {"/openid/v1/jwks": 1}  # cached: no fetch per token
    finally:
        issuer.close()


def test_an_issuer_that_cannot_be_reached_is_a_503_not_a_refusal(configure):
    issuer = Issuer(rsa_key("gone"))
    url = issuer.url
    issuer.close()
    configure(LORAPLANE_K8S_ISSUER=url)
    with pytest.raises(IssuerKeysUnavailable) as unavailable:
        pod_tokens.principal(mint(rsa_key("gone"), claims(url)))
    assert unavailable.value.status == 503
    assert unavailable.value.message == (f"the cluster issuer cannot be reached for its discovery document "
                                         f"({url}/.well-known/openid-configuration): ConnectError")


def test_an_issuer_that_fails_is_asked_again_only_after_a_pause(configure):
    issuer = Issuer(rsa_key("paused"))
    try:
        configure(LORAPLANE_K8S_ISSUER=f"{issuer.url}/elsewhere")  # its discovery answers 404
        for _ in range(3):
            with pytest.raises(IssuerKeysUnavailable) as unavailable:
                pod_tokens.principal(mint(rsa_key("paused"), claims(f"{issuer.url}/elsewhere")))
            assert unavailable.value.message == (
                f"the cluster issuer answered 404 for its discovery document "
                f"({issuer.url}/elsewhere/.well-known/openid-configuration)")
        assert issuer.requests == {"/elsewhere/.well-known/openid-configuration": 1}
    finally:
        issuer.close()


@pytest.mark.parametrize(("settings", "message"), [
    ({"LORAPLANE_K8S_ISSUER": "http://kubernetes.default.svc"},
     "LORAPLANE_K8S_ISSUER must be an https URL (http only on a loopback address)"),
    ({"LORAPLANE_K8S_JWKS_FILE": "/keys/jwks.json", "LORAPLANE_K8S_JWKS_URL": "https://k/openid/v1/jwks"},
     "LORAPLANE_K8S_JWKS_FILE and LORAPLANE_K8S_JWKS_URL are both set: give one"),
    ({"LORAPLANE_K8S_SERVICE_ACCOUNTS": "{}"},
     "LORAPLANE_K8S_ISSUER is set but LORAPLANE_K8S_SERVICE_ACCOUNTS maps no service account to a pool"),
    ({"LORAPLANE_K8S_SERVICE_ACCOUNTS": '{"llm/a": "pool-a", "llm/a": "pool-b"}'},
     "LORAPLANE_K8S_SERVICE_ACCOUNTS names 'llm/a' twice: one service account maps to exactly one pool"),
    ({"LORAPLANE_K8S_SERVICE_ACCOUNTS": '{"loraplane-pool-a": "pool-a"}'},
     "LORAPLANE_K8S_SERVICE_ACCOUNTS: 'loraplane-pool-a' is not \"namespace/serviceaccount\""),
    ({"LORAPLANE_K8S_SERVICE_ACCOUNTS": '{"llm/a": "Pool A"}'},
     "LORAPLANE_K8S_SERVICE_ACCOUNTS: 'llm/a' maps to 'Pool A', which is not a pool name"),
    ({"LORAPLANE_K8S_MAX_TOKEN_LIFETIME_S": "60"}, "greater than or equal to 600"),
])
def test_settings_that_could_never_admit_a_node_are_refused_at_start(configure, settings, message):
    configure(**settings)
    with pytest.raises(ValidationError) as refused:
        RegistrySettings()
    assert message in str(refused.value)


def test_node_identity_settings_without_an_issuer_are_refused(configure):
    configure()
    del os.environ["LORAPLANE_K8S_ISSUER"]
    with pytest.raises(ValidationError) as refused:
        RegistrySettings()
    assert ("LORAPLANE_K8S_SERVICE_ACCOUNTS configure Kubernetes node identity, but "
            "LORAPLANE_K8S_ISSUER is unset") in str(refused.value)
