"""The plugin never raises into vLLM and never waits past its deadline, whatever answers on the
agent's socket: nothing, a slow agent, garbage, a closed connection, an endless line, or an answer
for another name. Many first requests for one name ask the agent once."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from loraplane_vllm_resolver.asking import Asker, Resolved

pytestmark = pytest.mark.fast
NAME = "acme/digits@1"
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def ask_with(tmp_path: Path, handler: Handler | None, *, deadline_s: float = 0.5, asks: int = 1,
             name: str = NAME) -> tuple[list[Resolved | None], float, int]:
    """Answers of `asks` concurrent asks to a socket served by `handler` (None: no server at all),
    the seconds they took, and how many connections the server saw."""
    path = tmp_path / "r.sock"
    connections = 0

    async def counted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        assert handler is not None
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    async def main() -> tuple[list[Resolved | None], float]:
        server = await asyncio.start_unix_server(counted, path=str(path)) if handler else None
        asker = Asker(str(path), deadline_s)
        started = time.monotonic()
        try:
            answers = await asyncio.gather(*(asker.ask("/models/base", name) for _ in range(asks)))
        finally:
            if server is not None:
                server.close()
        return list(answers), time.monotonic() - started

    answers, took = asyncio.run(main())
    return answers, took, connections


def answering(answer: bytes, *, pause_s: float = 0.0) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        question = json.loads(await reader.readline())
        assert question == {"lora_name": NAME, "base_model_name": "/models/base"}
        await asyncio.sleep(pause_s)
        writer.write(answer)
        await writer.drain()

    return handle


def resolved(path: str = "/cache/" + "a" * 64, name: str = NAME) -> bytes:
    return json.dumps({"answer": "resolved", "served_name": name, "path": path}).encode() + b"\n"


def test_an_answer_becomes_the_folder_to_load(tmp_path):
    answers, _, _ = ask_with(tmp_path, answering(resolved()))

    assert answers == [Resolved(NAME, "/cache/" + "a" * 64)]


def test_the_agents_refusals_are_none(tmp_path):
    for answer in ("unknown", "unavailable", "refused", "bad_request"):
        line = json.dumps({"answer": answer, "reason": "because"}).encode() + b"\n"
        assert ask_with(tmp_path, answering(line))[0] == [None], answer


def test_no_agent_listening_is_none_at_once(tmp_path):
    answers, took, _ = ask_with(tmp_path, None, deadline_s=5)

    assert answers == [None] and took < 1


def test_a_slow_agent_is_none_at_the_deadline(tmp_path):
    answers, took, _ = ask_with(tmp_path, answering(resolved(), pause_s=3), deadline_s=0.3)

    assert answers == [None] and 0.25 < took < 2


def test_an_agent_that_never_reads_is_none_at_the_deadline(tmp_path):
    async def silent(reader, writer):
        await asyncio.sleep(3)

    answers, took, _ = ask_with(tmp_path, silent, deadline_s=0.3)

    assert answers == [None] and took < 2


@pytest.mark.parametrize("garbage", [b"not json\n", b"[1, 2]\n", b"\xff\xfe\n", b'{"answer": "resolved"',
                                     b"", b"x" * (200 * 1024)],
                         ids=["text", "a list", "not utf-8", "no newline", "closed", "endless"])
def test_garbage_is_none(tmp_path, garbage):
    answers, took, _ = ask_with(tmp_path, answering(garbage), deadline_s=2)

    assert answers == [None] and took < 2


@pytest.mark.parametrize("answer", [resolved(name="acme/other@1"), resolved(path="relative/dir"),
                                    resolved(path="/cache/\x00x"), resolved(path="/" + "a" * 5000)],
                         ids=["another name", "a relative path", "a NUL", "too long"])
def test_an_answer_that_does_not_fit_the_question_is_none(tmp_path, answer):
    assert ask_with(tmp_path, answering(answer))[0] == [None]


def test_ten_first_requests_for_one_name_ask_once(tmp_path):
    answers, _, connections = ask_with(tmp_path, answering(resolved(), pause_s=0.2), asks=10)

    assert answers == [Resolved(NAME, "/cache/" + "a" * 64)] * 10
    assert connections == 1


def test_a_name_is_asked_again_once_the_last_question_ended(tmp_path):
    path = tmp_path / "r.sock"
    seen = []

    async def handle(reader, writer):
        seen.append(json.loads(await reader.readline())["lora_name"])
        writer.write(json.dumps({"answer": "unknown"}).encode() + b"\n")
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_unix_server(handle, path=str(path))
        asker = Asker(str(path), 1)
        first = await asker.ask("/b", NAME)
        second = await asker.ask("/b", NAME)
        server.close()
        return first, second

    assert asyncio.run(main()) == (None, None)
    assert seen == [NAME, NAME]  # a refusal is not remembered: the set may approve it later
