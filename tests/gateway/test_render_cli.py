"""`loraplane k8s render` prints, as YAML a GitOps repository can hold, the same objects the
reconciler applies, valid for their CRDs; a pool that does not exist is refused, naming it."""

from __future__ import annotations

import os
import subprocess

import yaml

from devkit.units_of_work import unit_of_work
from registry.gateway import service
from registry.gateway.objects import GatewaySpec
from tests.gateway.conftest import POOLS
from tests.gateway.crd_schemas import problems
from tests.support.cli import LORAPLANE

SETTINGS = {"LORAPLANE_GATEWAY_NAMESPACE": "llm", "LORAPLANE_GATEWAY_INSTANCE": "lp-loraplane",
            "LORAPLANE_GATEWAY_LLMD_API_VERSION": "inference.networking.x-k8s.io/v1alpha2",
            "LORAPLANE_GATEWAY_ENDPOINT_PICKER": '{"name": "{pool}-epp", "port": 9003}'}


def render(database_url: str, *args: str) -> subprocess.CompletedProcess:
    # The registry's database, secret and attestation keys, as on a registry pod.
    env = {**os.environ, "LORAPLANE_DATABASE_URL": database_url, **SETTINGS}
    return subprocess.run([LORAPLANE, "k8s", "render", *args], capture_output=True, text=True, env=env, timeout=120)


def test_render_prints_what_the_reconciler_applies(database_url, engine, promote_to, monkeypatch):
    pool = POOLS[1]
    promote_to(pool, "gw-render")
    promote_to(pool, "gw-render", "canary", 20)

    printed = render(database_url, "--pool", pool)

    assert printed.returncode == 0, printed.stderr
    documents = list(yaml.safe_load_all(printed.stdout))
    assert printed.stdout.startswith("---\n") and all(isinstance(d, dict) for d in documents)
    for variable, value in SETTINGS.items():
        monkeypatch.setenv(variable, value)
    from registry.settings import RegistrySettings

    with unit_of_work(engine) as session:
        applied = service.desired(session, GatewaySpec.from_settings(RegistrySettings()), pool).objects
    assert documents == applied
    assert [p for d in documents for p in problems(d, SETTINGS["LORAPLANE_GATEWAY_LLMD_API_VERSION"])] == []
    assert {d["metadata"]["annotations"].get("loraplane.dev/model") for d in documents} >= {
        "acme/gw-render", "acme/gw-render:canary", "acme/gw-render:production"}
    assert documents[0]["spec"]["endpointPickerRef"]["name"] == f"{pool}-epp"

    every = render(database_url)
    if every.returncode == 0:
        pools = {d["metadata"]["annotations"]["loraplane.dev/pool"] for d in yaml.safe_load_all(every.stdout)}
        assert set(POOLS) <= pools
    else:  # another test left a pool whose set does not verify: all or nothing
        assert every.stdout == "" and "Nothing was printed" in every.stderr, every.stderr


def test_a_missing_pool_is_refused_naming_it(database_url, gateway_pools):
    refused = render(database_url, "--pool", "no-such-pool")

    assert refused.returncode == 1 and refused.stdout == ""
    assert "pool 'no-such-pool' does not exist" in refused.stderr
    assert "Pools: " in refused.stderr and "loraplane pool list" in refused.stderr  # the hint names them
