"""Real faults on the node's own disk fail one version, never the whole pass: the other versions
still load, the failure is reported with its reason, and what a crash or a half-finished delete
left behind is cleaned up. The agent's code runs as it does in production (its cache, its vLLM
client, its reconciler); vLLM and the store are small HTTP stand-ins (stand_ins.py)."""

from __future__ import annotations

import os

from serving.agent.artifacts import AdapterCache
from tests.serving.agent.node_disk import LARGE, SMALL, largest_file
from tests.serving.agent.passes import accepted_by_the_registry, run_pass
from tests.serving.agent.stand_ins import entry


def test_a_disk_error_fails_only_its_version_and_the_pass_still_reports(store, vllm, tmp_path):
    large, small = entry(store, "large", LARGE), entry(store, "small", SMALL)

    with largest_file():
        status = run_pass(tmp_path / "cache", vllm, [large, small])  # the large one first

    assert vllm.adapters == {"acme/small@1": str(tmp_path / "cache" / small["digest"])}
    assert status["loaded"] == [{"served_name": "acme/small@1", "digest": small["digest"]}]
    assert status["failures"] == [{
        "served_name": "acme/large@1",
        "reason": "the node's cache could not store acme/large@1: File too large"}]
    assert accepted_by_the_registry(status).generation == 7
    assert os.listdir(tmp_path / "cache") == [small["digest"]]  # no partial download left behind


def test_leftovers_of_a_crash_are_removed_when_the_agent_starts(store, tmp_path):
    cache_dir = tmp_path / "cache"
    wanted = entry(store, "small", SMALL)
    (cache_dir / f".partial-{wanted['digest']}-0a1b2c3d").mkdir(parents=True)  # killed mid-download
    (cache_dir / f".partial-{wanted['digest']}-0a1b2c3d" / "adapter_config.json").write_bytes(b"{")
    (cache_dir / f".partial-{'e' * 64}-4e5f6a7b").write_bytes(b"")  # a file, not a folder
    (cache_dir / wanted["digest"]).mkdir()  # killed while evicting: files gone, marker gone
    (cache_dir / wanted["digest"] / "adapter_model.safetensors").write_bytes(b"s" * 10)
    (cache_dir / ("f" * 64)).write_bytes(b"not a folder")
    (cache_dir / "operator-notes.txt").write_text("not the agent's: left alone")

    AdapterCache(cache_dir, 10**9, timeout_s=5)

    assert os.listdir(cache_dir) == ["operator-notes.txt"]


def test_a_half_deleted_folder_or_a_file_in_its_place_is_replaced_by_a_verified_download(
        store, vllm, tmp_path):
    cache_dir = tmp_path / "cache"
    half, blocked, good = (entry(store, name, {**SMALL, "adapter_config.json": name.encode()})
                           for name in ("half", "blocked", "good"))
    AdapterCache(cache_dir, 10**9, timeout_s=5)  # the agent is running; then the disk changes:
    (cache_dir / half["digest"]).mkdir()
    (cache_dir / half["digest"] / "adapter_model.safetensors").write_bytes(b"truncated")
    (cache_dir / blocked["digest"]).write_bytes(b"a file where a folder belongs")

    status = run_pass(cache_dir, vllm, [half, blocked, good])

    assert status["failures"] == []
    assert sorted(vllm.adapters) == ["acme/blocked@1", "acme/good@1", "acme/half@1"]
    for wanted in (half, blocked):
        folder = cache_dir / wanted["digest"]
        assert (folder / "adapter_model.safetensors").read_bytes() == SMALL["adapter_model.safetensors"]
        assert (folder / "adapter_config.json").read_bytes() == wanted["served_name"][5:-2].encode()
    assert accepted_by_the_registry(status).loaded[0].served_name == "acme/blocked@1"


def test_vllms_words_in_a_refusal_are_made_safe_to_report(store, vllm, tmp_path, caplog):
    vllm.refusal = (500, "CUDA error:\x1b[31m out of memory\x00\ud800 (rank 64 > 16)")
    wanted = entry(store, "small", SMALL)

    status = run_pass(tmp_path / "cache", vllm, [wanted])

    assert status["failures"][0]["reason"] == (
        "vLLM refused the load (HTTP 500): CUDA error:?[31m out of memory?? (rank 64 > 16)")
    assert accepted_by_the_registry(status).failures[0].served_name == "acme/small@1"
    logged = [record.getMessage() for record in caplog.records if "could not load" in record.getMessage()]
    assert logged == ["could not load acme/small@1: vLLM refused the load (HTTP 500): "
                      "CUDA error:?[31m out of memory?? (rank 64 > 16)"]  # and to log
