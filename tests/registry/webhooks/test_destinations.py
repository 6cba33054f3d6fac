"""Which addresses a webhook may reach: only globally routable ones, in whatever form they are
written, unless their network is allowed."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from registry.webhooks import destinations

pytestmark = pytest.mark.fast

LOOPBACK = [ipaddress.ip_network("127.0.0.0/8")]


@pytest.mark.parametrize(("url", "allowed", "reason"), [
    ("http://169.254.169.254/latest", [], "169.254.169.254 is an internal address"),
    ("http://192.168.1.4/hook", [], "192.168.1.4 is an internal address"),
    ("http://100.64.0.1/hook", [], "100.64.0.1 is an internal address"),  # carrier-grade NAT
    ("http://100.127.255.254/hook", LOOPBACK, "100.127.255.254 is an internal address"),
    ("http://0.0.0.0:8080/hook", [], "0.0.0.0 is an internal address"),
    ("http://[::]:8080/hook", [], ":: is an internal address"),
    ("http://224.0.0.1/hook", [], "224.0.0.1 is an internal address"),  # multicast
    ("http://240.0.0.1/hook", [], "240.0.0.1 is an internal address"),  # reserved
    ("http://255.255.255.255/hook", [], "255.255.255.255 is an internal address"),
    ("http://[ff02::1]/hook", [], "ff02::1 is an internal address"),
    ("http://[fe80::1]/hook", [], "fe80::1 is an internal address"),
    ("http://[fd00::1]/hook", [], "fd00::1 is an internal address"),
    ("http://[::ffff:127.0.0.1]/hook", [], "::ffff:127.0.0.1 is an internal address (it reaches 127.0.0.1)"),
    ("http://[::ffff:a9fe:a9fe]/hook", [],
     "::ffff:a9fe:a9fe is an internal address (it reaches 169.254.169.254)"),
    ("http://[64:ff9b::10.0.0.1]/hook", [], "64:ff9b::10.0.0.1 is an internal address (it reaches 10.0.0.1)"),
    ("http://[64:ff9b:1::a00:1]/hook", [], "64:ff9b:1::a00:1 is an internal address"),  # local-use NAT64
    ("http://[2002:a00:1::1]/hook", [], "2002:a00:1::1 is an internal address (it embeds 10.0.0.1)"),  # 6to4
    ("http://[2001::1]/hook", [], "2001::1 is an internal address"),  # Teredo
    ("http://[::127.0.0.1]/hook", [], "::127.0.0.1 is an internal address"),  # IPv4-compatible
    ("http://localhost:8080/hook", [], "localhost resolves to an internal address"),
    ("http://a.localhost/hook", LOOPBACK, "a.localhost resolves to an internal address"),
    ("http://127.0.0.1:8080/hook", LOOPBACK, None),
    ("http://[::ffff:127.0.0.1]/hook", LOOPBACK, None),  # the same allowed destination, in IPv6
    ("https://hooks.example.com/hook", [], None),  # does not resolve here: checked at delivery
    ("http://8.8.8.8/hook", [], None),
    ("http://[64:ff9b::8.8.8.8]/hook", [], None),  # NAT64 to a public address
    ("http://[2606:4700::1111]/hook", [], None),
])
def test_addresses_as_written(url, allowed, reason):
    assert destinations.url_refusal(url, allowed) == reason


def test_a_name_is_refused_when_any_address_it_resolves_to_is_internal():
    host = socket.gethostname()  # /etc/hosts resolves it to loopback here, as DNS may point any name inside
    address = destinations.resolve(host, 80)[0]
    assert ipaddress.ip_address(address).is_loopback
    assert destinations.url_refusal(f"http://{host}/hook", []) == (
        f"{host} resolves to an internal address")
    assert destinations.resolved_refusal("hooks.example", ["8.8.8.8", "100.64.0.1"], []) == (
        "hooks.example resolves to an internal address")
    assert destinations.resolved_refusal("hooks.example", ["8.8.8.8", "2606:4700::1111"], []) is None


def test_a_name_that_resolves_inside_is_refused_at_delivery():
    reason = destinations.resolved_reason("http://localhost:9/hook", [])
    assert reason == "localhost resolves to an internal address"
    assert destinations.resolved_reason("http://localhost:9/hook",
                                        [*LOOPBACK, ipaddress.ip_network("::1/128")]) is None
    assert destinations.resolved_reason("http://no-such-host.invalid/", []).startswith(
        "cannot resolve no-such-host.invalid")
