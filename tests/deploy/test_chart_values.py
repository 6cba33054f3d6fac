"""values.schema.json refuses bad values before anything renders, each refusal naming the value;
what the schema cannot say (pools' names unique, ranks the eval engine can load) the templates
refuse, saying which pool."""

from __future__ import annotations

import helm_python
import pytest

from tests.deploy.chart import CHART, render

pytestmark = pytest.mark.fast

POOL = {"name": "chat", "replicas": 1, "maxLoras": 2, "maxCpuLoras": 4, "maxLoraRank": 16, "dtype": "float32"}

REFUSED = {
    "bad pool name": ({"pools": [{**POOL, "name": "Chat_Pool"}]}, "/pools/0/name", "does not match pattern"),
    "pool name too long": ({"pools": [{**POOL, "name": "a" * 25}]}, "/pools/0/name", "does not match pattern"),
    "no registry replicas": ({"registry": {"replicas": 0}}, "/registry/replicas", "minimum"),
    "one registry replica": ({"registry": {"replicas": 1}}, "/registry/replicas", "minimum: got 1, want 2"),
    "autoscaling down to one": ({"registry": {"autoscaling": {"minReplicas": 1}}},
                                "/registry/autoscaling/minReplicas", "minimum"),
    "a pool without pods": ({"pools": [{**POOL, "replicas": 0}]}, "/pools/0/replicas", "minimum"),
    "unknown top-level key": ({"replicaCount": 3}, "at ''", "'replicaCount' not allowed"),
    "unknown pool key": ({"pools": [{**POOL, "maxLora": 4}]}, "/pools/0", "'maxLora' not allowed"),
    "unknown registry key": ({"registry": {"replica": 3}}, "/registry", "'replica' not allowed"),
    "unknown profile": ({"profile": "tpu"}, "/profile", "value must be one of 'gpu', 'cpu'"),
    "unknown dtype": ({"pools": [{**POOL, "dtype": "fp8"}]}, "/pools/0/dtype", "value must be one of"),
    "unknown addressing": ({"s3": {"addressingStyle": "dns"}}, "/s3/addressingStyle", "value must be one of"),
    "unknown encryption": ({"s3": {"sse": "kms"}}, "/s3/sse", "value must be one of"),
    "an llm-d version without its group": ({"gateway": {"llmdApiVersion": "v1alpha2"}}, "/gateway/llmdApiVersion",
                                           "does not match pattern"),
    "an unknown failure mode": ({"gateway": {"endpointPicker": {"failureMode": "Retry"}}},
                                "/gateway/endpointPicker/failureMode", "value must be one of"),
    "a rank vLLM has no kernel for": ({"pools": [{**POOL, "maxLoraRank": 12}]}, "/pools/0/maxLoraRank",
                                      "value must be one of"),
    "a pool missing its limits": ({"pools": [{"name": "chat", "replicas": 1}]}, "/pools/0", "missing propert"),
    "no pools": ({"pools": []}, "/pools", "minItems"),
    "root in vLLM's pod": ({"podSecurityContext": {"runAsNonRoot": False}}, "/podSecurityContext/runAsNonRoot", ""),
    "a secret name with a slash": ({"database": {"existingSecret": "db/url"}}, "/database/existingSecret", "pattern"),
    # propertyNames' refusal names the key, not where it is
    "a setting that is not loraplane's": ({"extraEnv": {"AWS_SECRET_ACCESS_KEY": "x"}},
                                          "'AWS_SECRET_ACCESS_KEY'", "^LORAPLANE_"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_bad_values_are_refused_naming_the_value(case):
    values, field, why = REFUSED[case]
    with helm_python.Chart.load(CHART) as chart:
        with pytest.raises(helm_python.HelmValuesError) as refused:
            chart.validate_schema(chart.merge_values(values))
        message = str(refused.value)
    assert field in message and why in message, message
    with pytest.raises(helm_python.HelmValuesError):  # `helm install` and `helm template` too
        render(values)


@pytest.mark.parametrize(("values", "message"), [
    ({"pools": [POOL, {**POOL, "replicas": 2}]}, 'pools: "chat" appears twice'),
    ({"pools": [{**POOL, "maxLoraRank": 128}], "worker": {"maxLoraRank": 64}},
     "pools[chat].maxLoraRank 128 is above worker.maxLoraRank 64"),
    ({"pools": [{**POOL, "maxLoras": 8, "maxCpuLoras": 4}]}, "pools[chat].maxLoras 8 is above its maxCpuLoras 4"),
    ({"s3": {"sseKmsKeyId": "alias/loraplane"}}, "s3.sseKmsKeyId is set but s3.sse is not aws:kms"),
    ({"attestation": {"existingSecret": "", "keyring": ""}}, "attestation.existingSecret"),
    ({"fullnameOverride": "a-release-name-long-enough-x", "pools": [{**POOL, "name": "a-pool-name-that-is-long"}]},
     "longer than 52 characters"),
])
def test_what_the_schema_cannot_say_the_templates_refuse(values, message):
    with pytest.raises(helm_python.HelmRenderError, match=message.replace("[", r"\[").replace("]", r"\]")):
        render(values)


def test_the_defaults_and_examples_are_valid():
    from tests.deploy.chart import PROFILES

    with helm_python.Chart.load(CHART) as chart:
        for values in PROFILES.values():
            chart.validate_schema(chart.merge_values(values))
