"""The agent's answers to vLLM's resolver, over its real unix socket, with its own cache, proof
check and reconciler against stand-ins for the store and vLLM (test_on_demand.py runs the same
on a real vLLM): only proven, current versions resolve, each digest is fetched once however many
ask, a store that is away is told apart from an unknown name and reported, and a version asked for
is kept loaded by the passes that follow while it stays in the set."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from serving.agent.on_demand import OnDemand
from serving.agent.resolver_socket import ResolverSocket
from serving.agent.vllm_client import VllmClient
from serving.registry_client import ActiveSet
from tests.serving.agent.passes import Node, accepted_by_the_registry
from tests.serving.agent.stand_ins import entry

pytestmark = pytest.mark.fast
FILES = {"adapter_config.json": b'{"r": 8}', "adapter_model.safetensors": b"w" * 5000}


class Agent:
    """The agent's resolver half: a node's reconciler (load ahead off), its answers and its socket."""

    def __init__(self, tmp_path: Path, vllm, entries: list) -> None:
        self.node = Node(tmp_path / "cache", vllm)
        self.node.reconciler.load_ahead = False
        self.desired: ActiveSet | None = ActiveSet(7, entries, '"7"')
        self.socket = tmp_path / "r.sock"
        self.on_demand = OnDemand(self.node.reconciler, lambda: self.desired, deadline_s=5)

    def run(self, work) -> object:
        """`work(ask)` with the socket served, in one event loop."""
        async def main():
            self.node.reconciler.vllm = VllmClient(self.node.vllm.url, timeout_s=5)
            server = asyncio.create_task(ResolverSocket(self.socket, self.on_demand).serve())
            while not self.socket.exists():
                await asyncio.sleep(0.01)
            try:
                return await work(self.ask)
            finally:
                server.cancel()
                await asyncio.gather(server, return_exceptions=True)
                await self.node.reconciler.vllm.close()

        return asyncio.run(main())

    async def ask(self, name: str) -> dict:
        reader, writer = await asyncio.open_unix_connection(str(self.socket))
        writer.write(json.dumps({"lora_name": name, "base_model_name": "/base"}).encode() + b"\n")
        await writer.drain()
        answer = json.loads(await reader.readline())
        writer.close()
        return answer

    async def one_pass(self) -> dict:
        assert self.desired is not None
        return await self.node.reconciler.run_pass(self.desired)


def test_ten_asks_for_one_version_fetch_it_once_and_the_passes_keep_it(store, vllm, tmp_path):
    agent = Agent(tmp_path, vllm, [entry(store, "digits", FILES), entry(store, "other", FILES | {"x": b"1"})])

    async def work(ask):
        before = await agent.one_pass()
        answers = await asyncio.gather(*(ask("acme/digits@1") for _ in range(10)))
        vllm.adapters.clear()  # a restarted vLLM: what was asked for is loaded again
        after = await agent.one_pass()
        return before, answers, after

    before, answers, after = agent.run(work)

    assert before["loaded"] == []  # nothing loaded ahead
    assert store.requests == len(FILES)  # one download of each file, for ten asks
    assert {a["answer"] for a in answers} == {"resolved"}
    assert {a["path"] for a in answers} == {str(tmp_path / "cache" / Path(answers[0]["path"]).name)}
    assert [a["served_name"] for a in after["loaded"]] == ["acme/digits@1"]  # not acme/other@1: never asked
    assert vllm.loads == [("acme/digits@1", answers[0]["path"])]


@pytest.mark.parametrize("name", ["acme/absent@1", "acme/digits", "../etc", "acme/unproven@1", "acme/retiring@1"])
def test_what_is_not_a_proven_current_version_is_unknown_and_not_fetched(store, vllm, tmp_path, name):
    entries = [entry(store, "digits", FILES), entry(store, "unproven", FILES, key=None),
               {**entry(store, "retiring", FILES), "retiring": True}]
    agent = Agent(tmp_path, vllm, entries)

    answer = agent.run(lambda ask: ask(name))

    assert answer["answer"] == "unknown", answer
    assert store.requests == 0


def test_a_store_that_is_away_is_unavailable_and_reported_until_it_is_back(store, vllm, tmp_path):
    agent = Agent(tmp_path, vllm, [entry(store, "digits", FILES)])
    store.status = 503

    async def work(ask):
        away = await ask("acme/digits@1")
        report = await agent.one_pass()
        store.status = 200
        back = await ask("acme/digits@1")
        return away, report, back, await agent.one_pass()

    away, report, back, later = agent.run(work)

    assert away["answer"] == "unavailable" and "HTTP 503" in away["reason"]
    assert accepted_by_the_registry(report).failures[0].reason.startswith("approved but unavailable: ")
    assert back["answer"] == "resolved"
    assert later["failures"] == []


def test_a_version_that_left_the_set_is_unloaded_and_unknown_from_then_on(store, vllm, tmp_path):
    agent = Agent(tmp_path, vllm, [entry(store, "digits", FILES)])

    async def work(ask):
        first = await ask("acme/digits@1")
        vllm.adapters["acme/digits@1"] = first["path"]  # vLLM loaded what it was handed
        agent.desired = ActiveSet(8, [entry(store, "reverse", FILES | {"y": b"2"})], '"8"')
        await agent.one_pass()
        return first, await ask("acme/digits@1")

    first, again = agent.run(work)

    assert first["answer"] == "resolved" and again["answer"] == "unknown"
    assert "acme/digits@1" not in vllm.adapters
    assert Path(first["path"]).is_dir()  # left for eviction: nothing reloads from it any more


def test_bad_questions_are_refused_and_the_socket_goes_on(store, vllm, tmp_path):
    agent = Agent(tmp_path, vllm, [entry(store, "digits", FILES)])

    async def raw(line: bytes) -> dict:
        reader, writer = await asyncio.open_unix_connection(str(agent.socket))
        writer.write(line)
        await writer.drain()
        answer = json.loads(await reader.readline())
        writer.close()
        return answer

    async def work(ask):
        bad = [await raw(line) for line in (b"nope\n", b"[]\n", b'{"lora_name": 1}\n', b"x" * 10000 + b"\n")]
        return bad, await ask("acme/digits@1")

    bad, good = agent.run(work)

    assert [a["answer"] for a in bad] == ["bad_request"] * 4
    assert good["answer"] == "resolved"
