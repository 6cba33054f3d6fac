"""A node that closes a kept-alive connection just as the router reuses it (vLLM's server closes
idle ones after 5 s) costs no request: the router sends it again on a new connection, and does
not take the node out of rotation. A node that refuses connections is taken out.

The node here is a small HTTP server, not vLLM, because the race it stands for cannot be
triggered on demand in a real one: it answers the first request on each connection and closes
the connection when a second one arrives on it."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from serving.router import metrics
from serving.router.catalog import Target
from serving.router.fleet import Fleet
from serving.router.errors import RouterError
from serving.router.forward import Forwarder
from tests.support.services import free_port

ANSWER = json.dumps({"model": "acme/chat@1", "choices": [{"text": "ok"}]}).encode()
TARGET = Target("acme/chat@1", "acme/chat", "production")


async def _read_request(reader: asyncio.StreamReader) -> bool:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    await reader.readexactly(length)
    return True


async def one_answer_per_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    if await _read_request(reader):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER))
        await writer.drain()
        await _read_request(reader)  # the next request on this connection is never answered
    writer.close()


async def forward(forwarder: Forwarder) -> list[dict]:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    await forwarder.forward(TARGET, "/v1/completions", b'{"model": "acme/chat@1"}', send, serial=False)
    return sent


def make_fleet(port: int) -> Fleet:
    fleet = Fleet(spill_outstanding=8)
    fleet.update([{"node_id": "n1", "vllm_url": f"http://127.0.0.1:{port}", "stale": False,
                   "limits": {"max_cpu_loras": 4}, "serving": [TARGET.served_name]}])
    return fleet


def retries(reason: str) -> float:
    return metrics.REGISTRY.get_sample_value("loraplane_router_retries_total",
                                             {"node": "n1", "reason": reason}) or 0.0


def test_a_connection_closed_under_a_request_is_replaced_and_the_node_kept():
    async def scenario() -> None:
        port = free_port()
        server = await asyncio.start_server(one_answer_per_connection, "127.0.0.1", port)
        fleet = make_fleet(port)
        before = retries("stale_connection")
        async with server, aiohttp.ClientSession() as http:
            forwarder = Forwarder(fleet, http, cooldown_s=60, load_wait_s=0, retry_after_s=1)
            answers = [await forward(forwarder) for _ in range(3)]
        for sent in answers:
            assert sent[0]["status"] == 200 and sent[-1]["body"] == ANSWER
        assert retries("stale_connection") - before == 2  # the 2nd and 3rd reused a closed one
        assert fleet.choose(TARGET.served_name).down_until == 0  # still in rotation

    asyncio.run(scenario())


def test_a_node_that_refuses_connections_fails_and_cools_down():
    async def scenario() -> None:
        fleet = make_fleet(free_port())  # nothing listens there
        async with aiohttp.ClientSession() as http:
            forwarder = Forwarder(fleet, http, cooldown_s=60, load_wait_s=0, retry_after_s=1)
            with pytest.raises(RouterError) as failed:
                await forward(forwarder)
        assert failed.value.status == 503 and failed.value.code == "nodes_failed"
        assert "n1: connect: ClientConnectorError" in failed.value.message
        assert fleet.nodes["n1"].down_until > 0

    asyncio.run(scenario())
