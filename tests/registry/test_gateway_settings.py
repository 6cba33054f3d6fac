"""The LORAPLANE_GATEWAY_* settings are checked as the process starts, each refusal naming the
setting: a namespace, instance or llm-d group/version Kubernetes would refuse, a template naming
something other than {pool} and {inference_pool}, labels that select everything or make no
label value, and an API URL over plain http off this machine."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from registry.settings import RegistrySettings

pytestmark = pytest.mark.fast


def test_the_defaults_and_a_chart_s_values_are_taken(monkeypatch):
    defaults = RegistrySettings()
    assert (defaults.gateway_reconcile, defaults.gateway_llmd_api_version) == (False, "llm-d.ai/v1alpha2")
    assert defaults.gateway_endpoint_picker.name == "{inference_pool}-epp"
    monkeypatch.setenv("LORAPLANE_GATEWAY_ENDPOINT_PICKER", '{"name": "{pool}-epp", "failureMode": "FailOpen"}')
    monkeypatch.setenv("LORAPLANE_GATEWAY_POD_LABELS",
                       '{"app.kubernetes.io/instance": "lp", "loraplane.dev/pool": "{pool}"}')
    monkeypatch.setenv("LORAPLANE_GATEWAY_API_URL", "http://127.0.0.1:8001")
    chart = RegistrySettings()
    assert chart.gateway_endpoint_picker.failure_mode == "FailOpen" and chart.gateway_endpoint_picker.port == 9002
    assert chart.gateway_pod_labels == {"app.kubernetes.io/instance": "lp", "loraplane.dev/pool": "{pool}"}


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("LORAPLANE_GATEWAY_NAMESPACE", "LLM", "LORAPLANE_GATEWAY_NAMESPACE 'LLM' is not a namespace's name"),
    ("LORAPLANE_GATEWAY_INSTANCE", "lp_loraplane", "LORAPLANE_GATEWAY_INSTANCE 'lp_loraplane' must be"),
    ("LORAPLANE_GATEWAY_LLMD_API_VERSION", "v1alpha2", "is not group/version, such as llm-d.ai/v1alpha2"),
    ("LORAPLANE_GATEWAY_ENDPOINT_PICKER", '{"name": "{namespace}-epp"}', "may name only {pool} and {inference_pool}"),
    ("LORAPLANE_GATEWAY_ENDPOINT_PICKER", '{"failureMode": "Retry"}', "failureMode"),
    ("LORAPLANE_GATEWAY_POD_LABELS", "{}", "selects every pod of the namespace"),
    ("LORAPLANE_GATEWAY_POD_LABELS", '{"app": "a/{pool}"}', "does not make a label value"),
    ("LORAPLANE_GATEWAY_API_URL", "http://kube.example.com", "must be an https URL"),
])
def test_a_bad_setting_is_refused_naming_it(monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError, match=message.replace("{", r"\{").replace("}", r"\}")):
        RegistrySettings()
