"""The resolver class as vLLM's environment holds it (the installed plugin, with vLLM's own
LoRARequest): an agent's answer becomes a request with a stable id, and a misbehaving agent is
None, never an exception. Runs in vLLM's venv: the project's has no vLLM."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from devkit import engine

SCRIPT = r'''
import asyncio, json, sys
from loraplane_vllm_resolver.resolver import LoraplaneResolver, stable_id

async def serve(path, line):
    async def handle(reader, writer):
        await reader.readline()
        writer.write(line)
        await writer.drain()
        writer.close()
    return await asyncio.start_unix_server(handle, path=path)

async def main(folder):
    out = {}
    cases = {"good": json.dumps({"answer": "resolved", "served_name": "acme/a@1", "path": "/c/d"}).encode() + b"\n",
             "garbage": b"\xff\n", "closed": b"", "unknown": b'{"answer": "unknown"}\n'}
    for case, line in cases.items():
        path = f"{folder}/{case}.sock"
        server = await serve(path, line)
        request = await LoraplaneResolver(path, 2).resolve_lora("/base", "acme/a@1")
        server.close()
        out[case] = None if request is None else [request.lora_name, request.lora_path,
                                                   request.lora_int_id == stable_id("acme/a@1")]
    out["no agent"] = await LoraplaneResolver(f"{folder}/none.sock", 2).resolve_lora("/base", "acme/a@1")
    print(json.dumps(out))

asyncio.run(main(sys.argv[1]))
'''


def test_the_installed_resolver_answers_vllm_with_a_request_or_none(tmp_path: Path):
    ran = subprocess.run([str(engine.vllm_python()), "-c", SCRIPT, str(tmp_path)], capture_output=True,
                         text=True, timeout=120)

    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads(ran.stdout.splitlines()[-1]) == {
        "good": ["acme/a@1", "/c/d", True], "garbage": None, "closed": None, "unknown": None, "no agent": None}
