"""How the forwarder treats a node that fails, request by request:

- a kept-alive connection the node closes just as the router reuses it (vLLM's server closes idle
  ones after 5 s) costs no request, and the node stays in rotation;
- a node that refuses connections is taken out for a cooldown, and the client's 503 names node
  ids and fixed reasons, never node addresses;
- a node that took the request but does not answer in time gives a 504: the request is not sent
  again elsewhere (that would double the work on a pool that is already slow) and the node stays;
- a node that never completes the connection is taken out, and another holder answers;
- prompt-logprob requests go to a holder not busy with another, and wait their turn at a node
  for a bounded time only;
- in a pool that loads on demand, a version no node holds goes cold to a node, is counted cold
  when answered, and after two nodes whose engines could not load it is a 503 with Retry-After;
  a node whose engine already holds the name loaded from elsewhere than its digest's folder is
  not sent the prompt.

The nodes here are small HTTP servers, not vLLM, because what they stand for cannot be brought
about on demand in a real one."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest

from devkit.services import free_port
from serving.router import metrics
from serving.router.catalog import Target
from serving.router.engines import EngineCheck
from serving.router.errors import RouterError
from serving.router.fleet import Fleet
from serving.router.forward import Forwarder
from tests.serving.router.agreeing_engines import follow
from tests.serving.router.stand_in_node import ANSWER, StandInNode, read_request

TARGET = Target("acme/chat@1", "acme/chat", "production")


async def one_answer_per_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    if await read_request(reader):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER))
        await writer.drain()
        await read_request(reader)  # the next request on this connection is never answered
    writer.close()


async def forward(forwarder: Forwarder, serial: bool = False) -> list[dict]:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    await forwarder.forward(TARGET, "/v1/completions", b'{"model": "acme/chat@1"}', send, serial=serial)
    return sent


def make_fleet(*urls: str) -> Fleet:
    fleet = Fleet(spill_outstanding=8)
    follow(fleet, [{"node_id": f"n{i}", "vllm_url": url, "stale": False, "limits": {"max_cpu_loras": 4},
                   "serving": [TARGET.served_name]} for i, url in enumerate(urls, 1)])
    return fleet


def retries(reason: str) -> float:
    return metrics.REGISTRY.get_sample_value("loraplane_router_retries_total",
                                             {"node": "n1", "reason": reason}) or 0.0


def test_a_connection_closed_under_a_request_is_replaced_and_the_node_kept():
    async def scenario() -> None:
        server = await asyncio.start_server(one_answer_per_connection, "127.0.0.1", 0)
        fleet = make_fleet(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        before = retries("stale_connection")
        async with server, aiohttp.ClientSession() as http:
            forwarder = Forwarder(fleet, http, cooldown_s=60, load_wait_s=0, retry_after_s=1)
            answers = [await forward(forwarder) for _ in range(3)]
        for sent in answers:
            assert sent[0]["status"] == 200 and sent[-1]["body"] == ANSWER
        assert retries("stale_connection") - before == 2  # the 2nd and 3rd reused a closed one
        assert fleet.choose(TARGET.served_name).down_until == 0  # still in rotation

    asyncio.run(scenario())


def test_a_node_that_refuses_connections_cools_down_and_the_client_is_not_told_its_address():
    async def scenario() -> None:
        fleet = make_fleet(f"http://127.0.0.1:{free_port()}")  # nothing listens there
        before = retries("connect_failed")
        async with aiohttp.ClientSession() as http:
            forwarder = Forwarder(fleet, http, cooldown_s=60, load_wait_s=0, retry_after_s=1)
            with pytest.raises(RouterError) as failed:
                await forward(forwarder)
        assert (failed.value.status, failed.value.code) == (503, "nodes_failed")
        assert failed.value.message == "every node holding acme/chat@1 failed before answering: n1 (connect_failed)"
        assert b"127.0.0.1" not in failed.value.body()
        assert fleet.nodes["n1"].down_until > 0 and retries("connect_failed") == before + 1

    asyncio.run(scenario())


def test_a_node_that_takes_the_request_but_answers_too_late_gives_504_and_no_second_try():
    async def scenario() -> None:
        async with StandInNode(answers=False) as first, StandInNode(answers=False) as second:
            fleet = make_fleet(first.url, second.url)
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.3)) as http:
                forwarder = Forwarder(fleet, http, cooldown_s=60, load_wait_s=0, retry_after_s=1)
                with pytest.raises(RouterError) as failed:
                    await forward(forwarder)
            assert (failed.value.status, failed.value.code) == (504, "upstream_timeout")
            assert failed.value.message == "the node did not answer within 0.3 s"
            assert first.received + second.received == 1
            assert all(node.down_until == 0 and node.outstanding == 0 for node in fleet.nodes.values())

    asyncio.run(scenario())


def test_a_prompt_logprob_request_waits_its_turn_at_a_node_for_a_bounded_time():
    async def scenario() -> None:
        async with StandInNode() as node:
            fleet = make_fleet(node.url)
            async with aiohttp.ClientSession() as http:
                forwarder = Forwarder(fleet, http, cooldown_s=60, load_wait_s=0, retry_after_s=1,
                                      serial_wait_s=0.1)
                async with fleet.nodes["n1"].prompt_logprobs:  # another one is at the node
                    with pytest.raises(RouterError) as refused:
                        await forward(forwarder, serial=True)
                    assert (await forward(forwarder))[-1]["body"] == ANSWER  # others still go
                answered = await forward(forwarder, serial=True)  # its turn, now it is free
            assert (refused.value.status, refused.value.code) == (503, "overloaded")
            assert refused.value.message == ("prompt-logprob requests go to a node one at a time, "
                                             "and none finished within 0.1 s")
            assert answered[-1]["body"] == ANSWER and node.received == 2
            assert fleet.nodes["n1"].outstanding == 0

    asyncio.run(scenario())


def silent_listener() -> tuple[socket.socket, list[socket.socket]]:
    """A port that takes no more connections: its one-place backlog is full and nothing accepts,
    so the kernel drops further SYNs and a connect waits in silence, as to a hung host."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    for _ in range(2):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(listener.getsockname())
        fillers.append(filler)
    return listener, fillers


def test_a_node_that_never_completes_the_connection_is_taken_out_and_another_answers():
    async def scenario() -> None:
        listener, fillers = silent_listener()
        silent_url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        try:
            async with StandInNode() as healthy:
                fleet = make_fleet(silent_url, healthy.url)
                fleet.nodes["n2"].outstanding = 1  # so that the silent node is tried first
                timeout = aiohttp.ClientTimeout(total=30, sock_connect=0.3)
                async with aiohttp.ClientSession(timeout=timeout) as http:
                    forwarder = Forwarder(fleet, http, cooldown_s=60, load_wait_s=0, retry_after_s=1)
                    sent = await forward(forwarder)
                assert sent[-1]["body"] == ANSWER and healthy.received == 1
                assert (sent[0]["status"], dict(sent[0]["headers"])[b"x-loraplane-node"]) == (200, b"n2")
                assert fleet.nodes["n1"].down_until > 0 and fleet.nodes["n2"].down_until == 0
        finally:
            for s in (listener, *fillers):
                s.close()

    asyncio.run(scenario())


def test_a_prompt_logprob_request_goes_to_a_holder_that_is_not_busy_with_another():
    async def scenario() -> None:
        async with StandInNode() as first, StandInNode() as second:
            fleet = make_fleet(first.url, second.url)
            async with aiohttp.ClientSession() as http:
                forwarder = Forwarder(fleet, http, cooldown_s=60, load_wait_s=0, retry_after_s=1,
                                      serial_wait_s=0.1)
                async with fleet.nodes["n1"].prompt_logprobs:
                    fleet.nodes["n2"].outstanding = 5  # busier, but free of prompt-logprob work
                    sent = await forward(forwarder, serial=True)
            assert dict(sent[0]["headers"])[b"x-loraplane-node"] == b"n2"
            assert (first.received, second.received) == (0, 1)

    asyncio.run(scenario())


def cold_fleet(*urls: str) -> Fleet:
    """Nodes that hold nothing, in a pool whose overflow is on_demand."""
    fleet = Fleet(spill_outstanding=8)
    follow(fleet, [{"node_id": f"n{i}", "vllm_url": url, "stale": False, "limits": {"max_cpu_loras": 4},
                   "serving": []} for i, url in enumerate(urls, 1)])
    fleet.follow_active_set([{"served_name": TARGET.served_name, "digest": "d" * 64, "nodes": []}], on_demand=True)
    return fleet


def cold_sample(name: str, **labels: str) -> float:
    return sum(metrics.REGISTRY.get_sample_value(name, {**labels, "node": f"n{i}"}) or 0.0 for i in (1, 2, 3))


def test_a_cold_version_that_no_node_can_load_is_a_503_with_retry_after_after_two_nodes():
    async def scenario() -> None:
        async with StandInNode(status=404) as a, StandInNode(status=404) as b, StandInNode(status=404) as c:
            fleet = cold_fleet(a.url, b.url, c.url)
            before = cold_sample("loraplane_router_cold_requests_total", outcome="not_resolved")
            async with aiohttp.ClientSession() as http:
                forwarder = Forwarder(fleet, http, cooldown_s=60, load_wait_s=0, retry_after_s=5)
                with pytest.raises(RouterError) as refused:
                    await forward(forwarder)
            error = refused.value
            assert (error.status, error.code, error.retry_after_s) == (503, "adapter_unavailable", 5)
            assert error.message.startswith("acme/chat@1 is approved but no node could load it on demand now: ")
            assert error.message.count("(not_resolved)") == 2 and "127.0.0.1" not in error.message
            assert a.received + b.received + c.received == 2
            assert cold_sample("loraplane_router_cold_requests_total", outcome="not_resolved") == before + 2
            # A 404 from a node that was sent the version cold takes nothing from what it holds.
            assert all(node.down_until == 0 for node in fleet.nodes.values())

    asyncio.run(scenario())


def test_a_cold_version_answered_is_counted_cold_in_the_metrics_and_the_window():
    async def scenario() -> None:
        async with StandInNode() as node:
            fleet = cold_fleet(node.url)
            cold = metrics.REGISTRY.get_sample_value("loraplane_router_residency_ttft_seconds_count",
                                                     {"residency": "cold"}) or 0.0
            async with aiohttp.ClientSession() as http:
                forwarder = Forwarder(fleet, http, cooldown_s=60, load_wait_s=0, retry_after_s=1)
                sent = await forward(forwarder)
            assert sent[0]["status"] == 200 and sent[-1]["body"] == ANSWER
            assert (b"x-loraplane-residency", b"cold") in sent[0]["headers"]
            assert metrics.REGISTRY.get_sample_value("loraplane_router_residency_ttft_seconds_count",
                                                     {"residency": "cold"}) == cold + 1
            _, windows = forwarder.windows.take()
            assert [(w["served_name"], w["requests"], w["cold_requests"], sum(w["cold_ttft_buckets"]))
                    for w in windows] == [("acme/chat@1", 1, 1, 1)]
            assert windows[0]["cold_ttft_buckets"] == windows[0]["ttft_buckets"]

    asyncio.run(scenario())


def test_a_cold_prompt_never_goes_to_an_engine_holding_the_name_from_another_folder():
    async def scenario() -> None:
        planted = [{"id": TARGET.served_name, "parent": "tiny", "root": "/tmp/not-the-approved-bytes"}]
        async with StandInNode(models=planted) as impostor, StandInNode(models=[]) as honest:
            fleet = cold_fleet(impostor.url, honest.url)
            for other in range(4):  # the honest node has no free slot: the impostor is chosen first
                fleet.nodes["n2"].touch(f"acme/other@{other + 1}")
            async with aiohttp.ClientSession() as http:
                forwarder = Forwarder(fleet, http, cooldown_s=60, load_wait_s=0, retry_after_s=1,
                                      engines=EngineCheck(http, timeout_s=5))
                answers = [await forward(forwarder) for _ in range(4)]
            assert all(sent[0]["status"] == 200 for sent in answers)
            assert all((b"x-loraplane-node", b"n2") in sent[0]["headers"] for sent in answers)
            assert impostor.received == 0 and honest.received == 4
            refuted = metrics.REGISTRY.get_sample_value("loraplane_router_engine_checks_total",
                                                        {"node": "n1", "outcome": "refuted"})
            assert refuted is not None and refuted >= 4

    asyncio.run(scenario())
