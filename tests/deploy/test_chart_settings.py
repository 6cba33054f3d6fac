"""Every LORAPLANE_* variable the chart sets is one its process reads: a misspelt name would be
ignored by the process, and the setting silently left at its default."""

from __future__ import annotations

import pytest

from tests.deploy.chart import PROFILES, containers, env_of, objects, workloads
from tests.deploy.settings_names import PROCESSES, RESOLVER_PLUGIN_VARIABLES, variables_of

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_every_loraplane_variable_is_a_setting_of_its_process(profile_name):
    unknown, seen = [], set()
    for item in workloads(objects(PROFILES[profile_name])):
        for c in containers(item):
            if c["name"] == "vllm":  # only the resolver plugin's, inside vLLM
                unknown += [f"vllm: {v}" for v in env_of(c)
                            if v.startswith("LORAPLANE_") and v not in RESOLVER_PLUGIN_VARIABLES]
                continue
            if c["name"] == "vllm-plugin":  # copies the plugin, reads nothing
                assert env_of(c) == {}
                continue
            assert c["name"] in PROCESSES, f"{c['name']}: which process is it?"
            seen.add(c["name"])
            known = variables_of(c["name"])
            unknown += [f"{c['name']}: {v}" for v in env_of(c) if v.startswith("LORAPLANE_") and v not in known]
    assert unknown == []
    assert {"registry", "migrate", "housekeeper", "agent"} <= seen


def test_the_names_are_checked_against_the_code():
    assert "LORAPLANE_DATABASE_URL" in variables_of("migrate")
    assert "LORAPLANE_METRICS_PORT" in variables_of("worker")  # an option of `loraplane worker`
    assert "LORAPLANE_ENGINE_URL" in variables_of("worker") and "LORAPLANE_ENGINE_URL" not in variables_of("registry")
    assert "LORAPLANE_AGENT_NODE_ID" in variables_of("agent") and "LORAPLANE_NODE_ID" not in variables_of("agent")
