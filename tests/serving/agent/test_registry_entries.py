"""The registry's word is checked before the agent uses it: a digest becomes a cache folder and a
file name a path, so an entry whose digest is not 64 lowercase hex characters, whose file names
are not plain names, or whose served name is not tenant/name@N is refused and reported (by name
when it has a usable one), never used as a path; the well-formed entries beside it still load."""

from __future__ import annotations

import os

import pytest

from tests.serving.agent.node_disk import SMALL
from tests.serving.agent.passes import accepted_by_the_registry, run_pass
from tests.serving.agent.stand_ins import entry

HEX_RULE = "must be 64 lowercase hex characters"
FILE_RULE = "must be a plain file name: a letter or digit, then letters, digits, '.', '_' or '-'"


def test_a_digest_that_climbs_out_of_the_cache_is_refused_not_loaded(store, vllm, tmp_path):
    outside = tmp_path / "elsewhere"  # a folder outside the cache that looks like a cached version
    outside.mkdir()
    (outside / ".complete").touch()
    (outside / "adapter_model.safetensors").write_bytes(b"someone else's weights")
    escape = {**entry(store, "escape", SMALL), "digest": "../elsewhere"}
    good = entry(store, "good", SMALL)

    status = run_pass(tmp_path / "cache", vllm, [escape, good])

    assert [path for _, path in vllm.loads] == [str(tmp_path / "cache" / good["digest"])]
    assert status["failures"] == [{"served_name": "acme/escape@1", "reason":
                                   f"refused the registry's entry: digest {HEX_RULE} (got '../elsewhere')"}]
    assert accepted_by_the_registry(status).loaded[0].served_name == "acme/good@1"


def shown(value: object) -> str:
    """How a refusal quotes what it was sent: printable, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@pytest.mark.parametrize("digest", [
    "A" * 64,  # uppercase: another folder name for the same bytes
    "a" * 63, "a" * 64 + "\n", "ab\x00" + "c" * 61, "a" * 64 + "/..", None, 64,
])
def test_a_digest_that_is_not_64_lowercase_hex_is_refused(store, vllm, tmp_path, digest):
    bad = {**entry(store, "bad", SMALL), "digest": digest}
    good = entry(store, "good", SMALL)

    status = run_pass(tmp_path / "cache", vllm, [bad, good])

    assert list(vllm.adapters) == ["acme/good@1"]
    reason = f"refused the registry's entry: digest {HEX_RULE} (got {shown(digest)})"
    assert status["failures"] == [{"served_name": "acme/bad@1", "reason": reason}]
    assert os.listdir(tmp_path / "cache") == [good["digest"]]
    accepted_by_the_registry(status)


@pytest.mark.parametrize("name", ["../../etc/cron.d/x", "/etc/passwd", ".complete", "a/b", "..",
                                  "adapter\\model", "x" * 129, "adapter\x00.json"])
def test_a_file_name_that_is_not_a_plain_name_is_refused(store, vllm, tmp_path, name):
    bad = entry(store, "bad", {name: b"data"})
    good = entry(store, "good", SMALL)

    status = run_pass(tmp_path / "cache", vllm, [bad, good])

    assert list(vllm.adapters) == ["acme/good@1"]
    reason = f"refused the registry's entry: files.0.name {FILE_RULE} (got {shown(name)})"
    assert status["failures"] == [{"served_name": "acme/bad@1", "reason": reason}]
    assert store.requests == 2  # only the good entry's files were fetched
    accepted_by_the_registry(status)


def test_an_entry_without_a_usable_served_name_is_neither_loaded_nor_reported(store, vllm, tmp_path):
    good = entry(store, "good", SMALL)
    nameless = [{**entry(store, "x", SMALL), "served_name": name}
                for name in ("../../x@1", "ACME/x@1", "acme/x", "acme/x@1\n", None)]

    status = run_pass(tmp_path / "cache", vllm, [*nameless, "not an entry", good])

    assert list(vllm.adapters) == ["acme/good@1"]
    assert status["failures"] == []  # nothing to report them under: the registry would refuse the report
    assert accepted_by_the_registry(status).loaded[0].served_name == "acme/good@1"


def test_a_served_name_sent_twice_is_refused(store, vllm, tmp_path):
    first, second = entry(store, "twice", SMALL), entry(store, "twice", {**SMALL, "extra.json": b"{}"})

    status = run_pass(tmp_path / "cache", vllm, [first, second])

    assert vllm.loads == []
    assert status["failures"] == [{"served_name": "acme/twice@1", "reason":
                                   "refused: the registry sent this served name more than once"}]
