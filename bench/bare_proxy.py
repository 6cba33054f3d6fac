"""A minimal pass-through HTTP proxy: the floor any Python proxy reaches on these machines.

    python -m bench.bare_proxy --port 9000 --upstream http://127.0.0.1:8000 [--upstream ...]

The same server (uvicorn, httptools, uvloop) and client (aiohttp) as the router, and nothing
else: no auth, no parsing, no routing decision. With several upstreams it takes them in turn
(round-robin), which is the baseline the placement benchmark compares the router against.
"""

from __future__ import annotations

import argparse
import itertools
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import uvicorn
import uvloop

from devkit import services


def make_app(upstreams: list[str]):
    turn = itertools.cycle(upstreams)
    session: list[aiohttp.ClientSession] = []

    async def app(scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        if not session:
            # The router's keep-alive: idle connections closed before vLLM's own 5 s does.
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2)
            session.append(aiohttp.ClientSession(connector=connector, auto_decompress=False))
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        async with session[0].request(scope["method"], next(turn) + scope["path"], data=body,
                                      headers={"Content-Type": "application/json"}) as upstream:
            await send({"type": "http.response.start", "status": upstream.status,
                        "headers": [(b"content-type", upstream.headers.get("Content-Type", "").encode())]})
            async for chunk in upstream.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", action="append", required=True)
    args = parser.parse_args()
    config = uvicorn.Config(make_app([u.rstrip("/") for u in args.upstream]), host="127.0.0.1",
                            port=args.port, loop="none", http="httptools", lifespan="off",
                            log_level="warning", access_log=False)
    uvloop.run(uvicorn.Server(config).serve())


def start(folder: Path, upstreams: list[str]) -> services.Service:
    """Run the proxy as its own process, as the router runs, and wait until it accepts."""
    folder.mkdir(parents=True, exist_ok=True)
    log, port = folder / "bare-proxy.log", services.free_port()
    upstream_args = [arg for url in upstreams for arg in ("--upstream", url)]
    process = subprocess.Popen([sys.executable, "-m", "bench.bare_proxy", "--port", str(port), *upstream_args],
                               stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
                               cwd=Path(__file__).resolve().parents[1])
    service = services.Service(process, f"http://127.0.0.1:{port}", log)
    services.wait_until(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() is None,
                        timeout_s=30, what="bare proxy", log=log)
    return service


if __name__ == "__main__":
    main()
