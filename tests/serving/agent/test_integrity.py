"""Cached bytes are checked again before every load and while vLLM holds them: a folder is sealed
read-only once verified, hashed again before each load from it (after a vLLM restart, at adoption
by a restarted agent), and compared by its stat fingerprint at every pass while loaded. Bytes
that changed are unloaded, removed, reported as an incident, and replaced by fresh verified ones.
The agent's cache and reconciler run as in production; vLLM and the store are stand-ins."""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from pathlib import Path

import pytest

from serving.agent.artifacts import AdapterCache, FolderChanged
from serving.agent.entries import Entry
from serving.agent.integrity import Tampered
from tests.serving.agent.node_disk import SMALL
from tests.serving.agent.passes import Node, accepted_by_the_registry
from tests.serving.agent.stand_ins import entry

pytestmark = pytest.mark.fast

WEIGHTS = "adapter_model.safetensors"
OTHER_WEIGHTS = b"t" * len(SMALL[WEIGHTS])  # another adapter's weights: the same shape and size


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def replace_file(path: Path, data: bytes) -> None:
    """As someone with the agent's rights would: make the sealed folder writable, swap the file."""
    path.parent.chmod(0o755)
    path.unlink()
    path.write_bytes(data)


def tampered_message(file: str = WEIGHTS, found: bytes = OTHER_WEIGHTS) -> str:
    return (f"{file} changed on the node's disk after it was verified: sha256 "
            f"{sha(SMALL[WEIGHTS])[:12]}… approved, {sha(found)[:12]}… found")


def test_a_verified_folder_is_sealed_read_only_and_can_still_be_removed(store, tmp_path):
    cache = AdapterCache(tmp_path / "cache", 10**6, timeout_s=5)
    wanted = Entry.model_validate(entry(store, "small", SMALL))

    folder = asyncio.run(cache.ensure(wanted))

    assert stat.S_IMODE(folder.stat().st_mode) == 0o555
    assert {stat.S_IMODE((folder / name).stat().st_mode) for name in SMALL} == {0o444}
    cache.discard(wanted.digest)
    assert os.listdir(tmp_path / "cache") == []


def test_a_cached_file_replaced_is_found_before_the_next_load_and_the_folder_is_left_as_found(
        store, tmp_path):
    cache = AdapterCache(tmp_path / "cache", 10**6, timeout_s=5)
    wanted = Entry.model_validate(entry(store, "small", SMALL))
    folder = asyncio.run(cache.ensure(wanted))
    replace_file(folder / WEIGHTS, OTHER_WEIGHTS)

    with pytest.raises(Tampered) as found:
        asyncio.run(cache.ensure(wanted))

    assert str(found.value) == tampered_message()
    assert (folder / WEIGHTS).read_bytes() == OTHER_WEIGHTS  # for the caller to report, then discard
    cache.discard(wanted.digest)
    assert (asyncio.run(cache.ensure(wanted)) / WEIGHTS).read_bytes() == SMALL[WEIGHTS]
    assert store.requests == 2 * len(SMALL)  # fetched again


def test_bytes_changed_in_place_with_size_and_mtime_put_back_are_found_by_the_fingerprint(store, tmp_path):
    cache = AdapterCache(tmp_path / "cache", 10**6, timeout_s=5)
    wanted = Entry.model_validate(entry(store, "small", SMALL))
    folder = asyncio.run(cache.ensure(wanted))
    asyncio.run(cache.check_loaded(wanted))  # unchanged: passes
    weights = folder / WEIGHTS
    before = weights.stat()

    weights.chmod(0o644)
    with weights.open("r+b") as file:  # same inode, same size
        file.write(b"t")
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))  # the ctime cannot be put back

    with pytest.raises(FolderChanged):  # seen without reading a byte
        asyncio.run(cache.check_loaded(wanted))
    with pytest.raises(Tampered) as found:  # and the full check before the next load names it
        asyncio.run(cache.ensure(wanted))
    assert str(found.value) == tampered_message(found=b"t" + SMALL[WEIGHTS][1:])


def add_a_file(folder: Path) -> None:
    (folder / "adapter_model.bin").write_bytes(b"pickle")  # vLLM would read this one too


def remove_the_weights(folder: Path) -> None:
    (folder / WEIGHTS).unlink()


def put_a_fifo_in_place(folder: Path) -> None:
    (folder / WEIGHTS).unlink()
    os.mkfifo(folder / WEIGHTS)  # reading it would wait for a writer forever


@pytest.mark.parametrize(("change", "message"), [
    (add_a_file, "adapter_model.bin appeared in the cached folder after it was verified"),
    (remove_the_weights, f"{WEIGHTS} changed on the node's disk after it was verified: sha256 "
                         f"{sha(SMALL[WEIGHTS])[:12]}… approved, nothing found"),
    (put_a_fifo_in_place, f"{WEIGHTS} changed on the node's disk after it was verified: sha256 "
                          f"{sha(SMALL[WEIGHTS])[:12]}… approved, not a plain file found"),
])
def test_a_file_added_removed_or_replaced_by_a_fifo_is_tampering(store, tmp_path, change, message):
    cache = AdapterCache(tmp_path / "cache", 10**6, timeout_s=5)
    wanted = Entry.model_validate(entry(store, "small", SMALL))
    folder = asyncio.run(cache.ensure(wanted))
    folder.chmod(0o755)

    change(folder)

    with pytest.raises(FolderChanged):
        asyncio.run(cache.check_loaded(wanted))
    with pytest.raises(Tampered) as found:
        asyncio.run(cache.ensure(wanted))
    assert str(found.value) == message


def test_a_link_in_place_of_a_file_is_refused_even_to_identical_bytes(store, tmp_path):
    """A link could be pointed elsewhere later without changing anything in the folder."""
    cache = AdapterCache(tmp_path / "cache", 10**6, timeout_s=5)
    wanted = Entry.model_validate(entry(store, "small", SMALL))
    folder = asyncio.run(cache.ensure(wanted))
    outside = tmp_path / "identical.safetensors"
    outside.write_bytes(SMALL[WEIGHTS])
    folder.chmod(0o755)
    (folder / WEIGHTS).unlink()
    (folder / WEIGHTS).symlink_to(outside)

    with pytest.raises(Tampered) as found:
        asyncio.run(cache.ensure(wanted))
    assert str(found.value) == (f"{WEIGHTS} changed on the node's disk after it was verified: sha256 "
                                f"{sha(SMALL[WEIGHTS])[:12]}… approved, a link found")


def test_a_file_replaced_while_vllm_holds_it_is_unloaded_reported_and_replaced(store, vllm, tmp_path):
    wanted = entry(store, "small", SMALL)
    node = Node(tmp_path / "cache", vllm)
    node.run_pass([wanted])
    folder = tmp_path / "cache" / wanted["digest"]
    replace_file(folder / WEIGHTS, OTHER_WEIGHTS)  # vLLM reloads from here after evicting it

    status = node.run_pass([wanted])

    # Out of vLLM as soon as the folder changed, then its bytes were found wrong before a reload.
    assert [(i["served_name"], i["kind"]) for i in status["incidents"]] == [
        ("acme/small@1", "changed"), ("acme/small@1", "tampered")]
    assert status["incidents"][1]["reason"] == tampered_message()
    assert (folder / WEIGHTS).read_bytes() == SMALL[WEIGHTS]  # fresh bytes from the store
    assert vllm.loads == [("acme/small@1", str(folder))] * 2  # unloaded, then loaded again
    assert status["loaded"] == [{"served_name": "acme/small@1", "digest": wanted["digest"]}]
    assert status["failures"] == []
    report = accepted_by_the_registry(status)
    assert [i.kind for i in report.incidents] == ["changed", "tampered"]

    again = node.run_pass([wanted])  # the incident is still reported; nothing is loaded again
    assert again["incidents"] == status["incidents"] and len(vllm.loads) == 2


def test_after_a_vllm_restart_the_cached_copy_is_hashed_again_before_it_is_loaded(store, vllm, tmp_path):
    wanted = entry(store, "small", SMALL)
    node = Node(tmp_path / "cache", vllm)
    node.run_pass([wanted])
    folder = tmp_path / "cache" / wanted["digest"]
    vllm.adapters.clear()  # vLLM restarted: it holds nothing
    replace_file(folder / WEIGHTS, OTHER_WEIGHTS)

    status = node.run_pass([wanted])

    assert status["incidents"][0]["reason"] == tampered_message()
    assert (folder / WEIGHTS).read_bytes() == SMALL[WEIGHTS]
    assert vllm.adapters == {"acme/small@1": str(folder)}


def test_a_restarted_agent_hashes_what_vllm_holds_before_adopting_it(store, vllm, tmp_path):
    wanted, untouched = entry(store, "small", SMALL), entry(store, "untouched", {**SMALL, "x.json": b"{}"})
    Node(tmp_path / "cache", vllm).run_pass([wanted, untouched])
    replace_file(tmp_path / "cache" / wanted["digest"] / WEIGHTS, OTHER_WEIGHTS)  # while the agent was down

    status = Node(tmp_path / "cache", vllm).run_pass([wanted, untouched])  # no fingerprint in memory

    assert [(i["served_name"], i["reason"]) for i in status["incidents"]] == [("acme/small@1", tampered_message())]
    assert [name for name, _ in vllm.loads] == ["acme/small@1", "acme/untouched@1", "acme/small@1"]
    assert (tmp_path / "cache" / wanted["digest"] / WEIGHTS).read_bytes() == SMALL[WEIGHTS]


def test_a_folder_changed_and_put_back_while_vllm_holds_it_is_still_reloaded(store, vllm, tmp_path):
    """Bytes swapped for a moment (long enough for vLLM to reload them after an eviction) and put
    back before the next pass hash as approved again: the change alone unloads the adapter, and
    it is loaded again from verified bytes."""
    wanted = entry(store, "small", SMALL)
    node = Node(tmp_path / "cache", vllm)
    node.run_pass([wanted])
    weights = tmp_path / "cache" / wanted["digest"] / WEIGHTS
    replace_file(weights, OTHER_WEIGHTS)
    replace_file(weights, SMALL[WEIGHTS])  # back as approved, but not the same file any more

    status = node.run_pass([wanted])

    assert [(i["kind"], i["reason"]) for i in status["incidents"]] == [(
        "changed", "the cached folder of acme/small@1 changed while vLLM held it; unloaded, to be "
                   "loaded again once its bytes verify")]
    assert vllm.loads == [("acme/small@1", str(weights.parent))] * 2  # unloaded, then loaded again
    assert status["loaded"] == [{"served_name": "acme/small@1", "digest": wanted["digest"]}]


def test_a_file_of_another_size_is_never_read(store, tmp_path):
    """A huge or sparse file put in place costs nothing to refuse: its size is checked first."""
    cache = AdapterCache(tmp_path / "cache", 10**6, timeout_s=5)
    wanted = Entry.model_validate(entry(store, "small", SMALL))
    folder = asyncio.run(cache.ensure(wanted))
    folder.chmod(0o755)
    (folder / WEIGHTS).chmod(0o644)
    with (folder / WEIGHTS).open("r+b") as file:
        file.truncate(1 << 40)  # a 1 TiB sparse file: hashing it would take hours

    with pytest.raises(Tampered) as found:
        asyncio.run(cache.ensure(wanted))
    assert str(found.value) == (f"{WEIGHTS} changed on the node's disk after it was verified: sha256 "
                                f"{sha(SMALL[WEIGHTS])[:12]}… approved, a file of {1 << 40} bytes, "
                                f"not {len(SMALL[WEIGHTS])} found")
