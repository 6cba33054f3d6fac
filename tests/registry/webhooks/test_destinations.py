"""Which addresses a webhook may reach: internal ones only when their network is allowed."""

from __future__ import annotations

import ipaddress

import pytest

from registry.webhooks import destinations

LOOPBACK = [ipaddress.ip_network("127.0.0.0/8")]


@pytest.mark.parametrize(("url", "allowed", "reason"), [
    ("http://169.254.169.254/latest", [], "169.254.169.254 is an internal address"),
    ("http://192.168.1.4/hook", [], "192.168.1.4 is an internal address"),
    ("http://localhost:8080/hook", [], "localhost is an internal address"),
    ("http://127.0.0.1:8080/hook", LOOPBACK, None),
    ("https://hooks.example.com/hook", [], None),  # a name: checked again at delivery
    ("http://8.8.8.8/hook", [], None),
])
def test_literal_addresses(url, allowed, reason):
    assert destinations.literal_reason(url, allowed) == reason


def test_a_name_that_resolves_inside_is_refused_at_delivery():
    reason = destinations.resolved_reason("http://localhost:9/hook", [])
    assert reason is not None and reason.endswith("is an internal address")
    assert destinations.resolved_reason("http://localhost:9/hook",
                                        [*LOOPBACK, ipaddress.ip_network("::1/128")]) is None
    assert destinations.resolved_reason("http://no-such-host.invalid/", []).startswith(
        "cannot resolve no-such-host.invalid")
