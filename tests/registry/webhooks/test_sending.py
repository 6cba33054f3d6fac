"""A delivery connects to exactly the address it checked. The name is resolved once; a second
answer (DNS rebinding) is never asked for, and the Host header, the TLS server name and the
certificate check stay those of the URL. A refused address fails the delivery at once, with the
reason recorded, instead of being retried.

DNS itself cannot run here (no resolver a test could point at a zone of its own), so the tests
replace `socket.getaddrinfo` for one made-up name: every other lookup, and every connection,
is real."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from registry.tables import Webhook, WebhookDelivery
from registry.webhooks import deliveries, sending, signing
from registry.webhooks.deliveries import Send
from registry.webhooks.service import FAILED, PENDING
from tests.registry.webhooks.receivers import Receiver, self_signed
from devkit.units_of_work import unit_of_work

NAME = "hooks.example"
PUBLIC = "127.0.0.2"  # stands for the receiver's public address: the only network allowed here
ALLOWED = [ipaddress.ip_network(f"{PUBLIC}/32")]


def send_to(url: str) -> Send:
    return Send(delivery_id=41, url=url, secret="whsec_test", event="promotion.approved", body=b'{"id":41}')


class Answers(dict):
    """name -> the address lists it answers, one list per lookup (the last one once they run
    out); `asked` records each lookup of those names."""

    asked: list[str]


@pytest.fixture
def dns(monkeypatch) -> Answers:
    answers, real = Answers(), socket.getaddrinfo
    answers.asked = []

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in answers:
            return real(host, port, *args, **kwargs)
        answers.asked.append(host)
        addresses = answers[host].pop(0) if len(answers[host]) > 1 else answers[host][0]
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in addresses]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers


@pytest.fixture
def receivers() -> Iterator[tuple[Receiver, Receiver]]:
    """The receiver at PUBLIC, and an internal service on loopback at the same port."""
    for _ in range(20):  # the port free at PUBLIC may be taken on loopback (by another test's service)
        public = Receiver(PUBLIC)
        try:
            internal = Receiver("127.0.0.1", public.port)
            break
        except OSError:
            public.close()
    else:
        pytest.fail("no port was free at both addresses in 20 tries")
    yield public, internal
    public.close()
    internal.close()


def test_a_name_that_rebinds_after_the_check_reaches_only_the_checked_address(dns, receivers):
    public, internal = receivers
    dns[NAME] = [[PUBLIC], ["127.0.0.1"]]  # checked: public; asked again: the internal service

    attempt = sending.deliver(send_to(f"http://{NAME}:{public.port}/hook"), timeout_s=2, allowed=ALLOWED)

    assert attempt == sending.Attempt(204, None)
    assert internal.requests == []
    [(headers, body)] = public.requests
    assert headers["Host"] == f"{NAME}:{public.port}" and body == b'{"id":41}'
    assert signing.verify("whsec_test", body, headers[signing.HEADER])
    assert headers["X-Loraplane-Delivery"] == "41" and headers["X-Loraplane-Event"] == "promotion.approved"
    assert dns.asked == [NAME]  # resolved once


@pytest.mark.parametrize(("answer", "reason"), [
    (["100.64.0.1"], "100.64.0.1, an internal address"),
    (["::ffff:127.0.0.1"], "::ffff:127.0.0.1, an internal address (it reaches 127.0.0.1)"),
    (["0.0.0.0"], "0.0.0.0, an internal address"),
    (["::"], "::, an internal address"),
    (["169.254.169.254"], "169.254.169.254, an internal address"),
    (["64:ff9b::a9fe:a9fe"], "64:ff9b::a9fe:a9fe, an internal address (it reaches 169.254.169.254)"),
    ([PUBLIC, "127.0.0.1"], "127.0.0.1, an internal address"),  # one bad answer is enough
])
def test_a_name_that_resolves_to_an_internal_address_is_refused_for_good(dns, receivers, answer, reason):
    public, internal = receivers
    dns[NAME] = [answer]

    attempt = sending.deliver(send_to(f"http://{NAME}:{public.port}/hook"), timeout_s=2, allowed=ALLOWED)

    # Which address, and why, goes to the log only (`reason`): the webhook's owner learns nothing
    # of the registry's internal DNS.
    assert attempt == sending.Attempt(None, f"refused: {NAME} resolves to an internal address", final=True)
    assert public.requests == internal.requests == []


def test_tls_checks_the_urls_name_on_the_pinned_connection(dns, monkeypatch, tmp_path):
    certificate, key = self_signed(tmp_path, NAME)
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate))  # trusted as a public CA's would be
    receiver = Receiver(PUBLIC, tls=(certificate, key))
    dns[NAME] = [[PUBLIC]]
    dns["other.example"] = [[PUBLIC]]
    try:
        attempt = sending.deliver(send_to(f"https://{NAME}:{receiver.port}/hook"), timeout_s=2,
                                  allowed=ALLOWED)
        wrong_name = sending.deliver(send_to(f"https://other.example:{receiver.port}/hook"),
                                     timeout_s=2, allowed=ALLOWED)
    finally:
        receiver.close()

    assert attempt == sending.Attempt(204, None)
    assert receiver.requests[0][0]["Host"] == f"{NAME}:{receiver.port}"
    assert receiver.server_names == [NAME, "other.example"]
    assert wrong_name == sending.Attempt(None, "ConnectError")  # the certificate is not other.example's
    assert len(receiver.requests) == 1


def test_a_name_that_does_not_resolve_is_tried_again_later():
    attempt = sending.deliver(send_to("http://no-such-host.invalid/hook"), timeout_s=2, allowed=[])
    assert attempt.status is None and not attempt.final
    assert attempt.error.startswith("cannot resolve no-such-host.invalid: ")


def test_a_refused_delivery_fails_at_once_with_its_reason(engine: Engine):
    with unit_of_work(engine) as session:
        hook = Webhook(url="http://hooks.example/hook", events=["*"], secret="whsec_test",
                       created_by="tests")
        session.add(hook)
        session.flush()
        row = WebhookDelivery(webhook_id=hook.id, event="promotion.approved", payload={},
                              state=PENDING, attempts=0)
        session.add(row)
        session.flush()
        hook_id, delivery_id = hook.id, row.id
    refused = "refused: hooks.example resolves to an internal address"
    try:
        with unit_of_work(engine) as session:
            later = deliveries.record_attempt(session, delivery_id, status=None, error="ConnectError",
                                              max_attempts=8, backoff_s=1)
        with unit_of_work(engine) as session:
            never = deliveries.record_attempt(session, delivery_id, status=None, error=refused,
                                              max_attempts=8, backoff_s=1, final=True)
        with Session(engine) as session:
            row = session.get(WebhookDelivery, delivery_id)
            assert (later, never) == (1, None)
            assert (row.state, row.attempts, row.last_error) == (FAILED, 2, refused)
            assert row.next_attempt_at is None
    finally:
        with unit_of_work(engine) as session:
            session.get(Webhook, hook_id).disabled_at = session.get(Webhook, hook_id).created_at
