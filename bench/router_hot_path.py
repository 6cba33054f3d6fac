"""The router's own work per request, without vLLM's noise: its ASGI app in this process, in turns
with a plain aiohttp request to the same upstream.

    ./dev bench router_hot_path [--requests 3000 --rounds 5]

The upstream is a tiny HTTP server in this process that answers every request at once with a
fixed completion, so what is left is parsing, key cache, name resolution, admission, node
choice, metrics and the relay. On the 2-core machines the end-to-end figures of bench/router.py
also hold the scheduling of one more process on a saturated CPU; this one does not.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import time

import aiohttp

from bench import report
from serving.router.admission import Admission
from serving.router.app import RouterApp
from serving.router.app_keys import App, AppKeys
from serving.router.catalog import Catalog
from serving.router.fleet import Fleet
from serving.router.forward import Forwarder

DIGEST = "d" * 64
SERVED = "acme/chat@1"
ANSWER = json.dumps({"model": SERVED, "choices": [{"text": "ok"}],
                     "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()
BODY = json.dumps({"model": "acme/chat", "prompt": "digits: 1 2 =>", "max_tokens": 4}).encode()
KEY = "Bearer lpt_" + "b" * 43  # the shape of a real key; known to the cache below


async def answer_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            break
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(ANSWER), ANSWER))
        await writer.drain()
    writer.close()


def make_app(http: aiohttp.ClientSession, port: int) -> RouterApp:
    fleet = Fleet(spill_outstanding=8)
    fleet.update([{"node_id": "n1", "vllm_url": f"http://127.0.0.1:{port}", "stale": False,
                   "limits": {"max_cpu_loras": 4}, "serving": [SERVED]}])
    # Confirmed as the router confirms a node once its engine lists the name (off the hot path).
    fleet.digests[SERVED] = DIGEST
    for node in fleet.due_for_check():
        fleet.judge(node, {SERVED: DIGEST})
    keys = AppKeys("http://127.0.0.1:9", ttl_s=3600)  # the key is known: no registry needed
    keys._apps[hashlib.sha256(KEY.encode()).digest()] = (App("bench", "acme", "interactive"), time.monotonic())
    app = RouterApp("bench", keys, Admission(64, 8, 30), Forwarder(
        fleet, http, cooldown_s=5, load_wait_s=0, retry_after_s=1), max_body_bytes=1 << 20, retry_after_s=1)
    app.catalog = Catalog.from_active_set("bench", 1, [{
        "tenant": "acme", "adapter": "chat", "served_name": SERVED,
        "aliases": [{"alias": "production", "weight": 100}], "retiring": False}])
    return app


async def through_router(app: RouterApp) -> None:
    scope = {"type": "http", "path": "/v1/completions", "method": "POST",
             "headers": [(b"authorization", KEY.encode()), (b"content-length", str(len(BODY)).encode())]}
    answered = asyncio.Event()
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": BODY, "more_body": False}]

    async def receive() -> dict:
        if messages:
            return messages.pop()
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    answered.set()
    if sent[0]["status"] != 200:
        raise RuntimeError(sent)


async def measure(requests: int, rounds: int) -> dict[str, list[float]]:
    server = await asyncio.start_server(answer_at_once, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    per_request: dict[str, list[float]] = {"direct": [], "router": []}
    async with server, aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        app = make_app(http, port)

        async def direct() -> None:
            async with http.post(f"http://127.0.0.1:{port}/v1/completions", data=BODY) as response:
                await response.read()

        ways = {"direct": direct, "router": lambda: through_router(app)}
        for way in ways.values():  # warm-up
            for _ in range(200):
                await way()
        for _ in range(rounds):
            for name, way in ways.items():
                started = time.perf_counter()
                for _ in range(requests):
                    await way()
                per_request[name].append((time.perf_counter() - started) / requests)
    return per_request


def main() -> None:
    import uvloop

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    per_request = uvloop.run(measure(args.requests, args.rounds))
    added = [(r - d) * 1e6 for r, d in zip(per_request["router"], per_request["direct"])]
    metrics = {"router_added_us_per_request": round(statistics.median(added), 1),
               "direct_us_per_request": round(statistics.median(per_request["direct"]) * 1e6, 1),
               "router_us_per_request": round(statistics.median(per_request["router"]) * 1e6, 1)}
    report.write("router_hot_path", metrics, {
        "requests_per_round": args.requests, "rounds": args.rounds, "loop": "uvloop",
        "upstream": "an in-process HTTP server answering at once", "added": "median over rounds"})


if __name__ == "__main__":
    main()
