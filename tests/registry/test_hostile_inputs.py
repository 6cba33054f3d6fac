"""Hostile uploads against a registry process capped at 3 GiB of address space.

The bound stated and checked here: over the whole module the registry's peak RSS grows by at
most 256 MiB above what it used when the module started, and each attack that used to take
memory (a regex, a tar header, a zip directory, a safetensors header) by at most 16 MiB. Every input is answered
with a clean 4xx JSON error within 10 s, nothing is stored, and /readyz still answers 200.

The attacks come from bench/hostile_corpus: its fixed grid (what bench/hostile.py measures),
then each family again with parameters drawn by hypothesis (25 examples a family).
"""

from __future__ import annotations

import json
import resource
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.hostile_corpus import Adapter, Attack, as_attack
from bench.hostile_corpus import archives as ar
from bench.hostile_corpus import documents as doc
from bench.hostile_corpus import multipart_attacks as mp
from bench.hostile_corpus.grid import grid
from devkit import services
from tests.conftest import MAX_UPLOAD_BYTES
from tests.support.asserts import assert_refused

MiB = 1024 * 1024
ADDRESS_SPACE_CAP = 3 * 1024 * MiB
MODULE_RSS_GROWTH_MB = 256
ATTACK_RSS_GROWTH_MB = 16
REFUSAL_SECONDS = 10
UNDER_LIMIT = MAX_UPLOAD_BYTES - MiB  # room for the multipart framing
MAX_FILES = 16  # LORAPLANE_MAX_ARCHIVE_FILES of the test registries
UPLOAD = "/v1/adapters/acme/hostile/versions"
EXAMPLES = settings(max_examples=25, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


class Memory:
    """The registry's resident memory: the module's starting point, and peaks since a reset."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.baseline = psutil.Process(pid).memory_info().rss

    def reset_peak(self) -> int:
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")  # the peak (VmHWM) restarts from now
        return psutil.Process(self.pid).memory_info().rss

    def peak(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmHWM")

    def growth_mb(self, since: int | None = None) -> float:
        return (self.peak() - (self.baseline if since is None else since)) / MiB


@pytest.fixture(scope="module")
def capped(service_dir: Path, registry: services.Service) -> services.Service:
    """A registry on the session's database, broker and bucket, under an address-space cap."""
    env = {key: value for key, value in registry.env.items() if key.startswith("LORAPLANE_")}
    env.pop("LORAPLANE_PUBLIC_URL", None)
    env.pop("LORAPLANE_DATA_DIR", None)
    server = services.start_registry(service_dir / "registry-capped", env)
    resource.prlimit(server.process.pid, resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(capped: services.Service, tokens: dict[str, str]) -> httpx.Client:
    with httpx.Client(base_url=capped.url, timeout=REFUSAL_SECONDS * 3,
                      headers={"Authorization": f"Bearer {tokens['acme_uploader']}"}) as client:
        yield client


@pytest.fixture(scope="module")
def memory(capped: services.Service, client: httpx.Client) -> Memory:
    assert client.get("/readyz").status_code == 200  # warm: the first request loads what it needs
    return Memory(capped.process.pid)


@pytest.fixture(scope="module")
def adapter(make_adapter, base_model) -> Adapter:
    folder = make_adapter(seed=3)
    return Adapter(json.loads((folder / "adapter_config.json").read_text()),
                   (folder / "adapter_model.safetensors").read_bytes())


def send(client: httpx.Client, attack: Attack) -> httpx.Response:
    started = time.monotonic()
    response = client.post(UPLOAD, content=attack.body, headers={"Content-Type": attack.content_type})
    elapsed = time.monotonic() - started
    assert 400 <= response.status_code < 500, f"{attack.name}: {response.status_code} {response.text[:500]}"
    error = response.json()["error"]
    assert isinstance(error["code"], str) and error["code"], attack.name
    assert isinstance(error["message"], str) and error["message"], attack.name
    assert elapsed < REFUSAL_SECONDS, f"{attack.name} took {elapsed:.1f} s"
    return response


def assert_unharmed(client: httpx.Client, memory: Memory, stored_state, before: dict,
                    *, since: int | None = None, bound_mb: float = MODULE_RSS_GROWTH_MB) -> None:
    assert memory.growth_mb(since) <= bound_mb
    assert stored_state() == before
    assert client.get("/readyz").status_code == 200


# --- the attacks that used to take memory or time, each with its exact refusal ---------------


def test_a_zip_directory_larger_than_its_end_record_claims_is_refused_unread(
        client, memory, adapter, stored_state):
    """The end record says 2 entries; the directory holds 150,000. zipfile used to read them
    all into objects (about 100 MiB) before the entry limit was checked."""
    before, start = stored_state(), memory.reset_peak()

    response = send(client, ar.zip_directory(UNDER_LIMIT // 47, 2))

    assert_refused(response, 413, "too_many_files", f"a.zip holds more than {MAX_FILES} entries")
    assert_unharmed(client, memory, stored_state, before, since=start, bound_mb=ATTACK_RSS_GROWTH_MB)


@pytest.mark.parametrize("kind", ["gnu", "pax"])
def test_a_long_name_tar_header_is_refused_before_it_is_read(client, memory, stored_state, kind):
    """150 MB of one long name in a 150 kB .tar.gz: tarfile used to read it whole."""
    before, start = stored_state(), memory.reset_peak()

    response = send(client, ar.tar_long_name(150_000_000, kind, "gzip"))

    assert_refused(response, 413, "archive_header_too_large",
                   "a.tar.gz: a long-name or pax header of 150000000 bytes exceeds the limit of 4096")
    assert_unharmed(client, memory, stored_state, before, since=start, bound_mb=ATTACK_RSS_GROWTH_MB)


def test_a_regex_that_would_take_all_memory_is_refused_before_it_compiles(
        client, memory, adapter, stored_state):
    """23 characters that regex.compile unrolls into 10^9 items: under this cap it used to end
    in a 500 MemoryError, and without one the process grew past 20 GB."""
    before, start = stored_state(), memory.reset_peak()
    config = json.dumps({**adapter.config, "target_modules": "((a{1000}){1000}){1000}"}).encode()

    response = send(client, as_attack("regex", adapter.files(config=config)))

    assert_refused(response, 422, "invalid_config", "adapter_config.json: target_modules regex is too "
                   "complex to compile safely: its repeat counts multiply out to more than 1000")
    assert "list of module names" in response.json()["error"]["hint"]
    assert_unharmed(client, memory, stored_state, before, since=start, bound_mb=ATTACK_RSS_GROWTH_MB)


def test_a_safetensors_header_larger_than_its_base_needs_is_refused_unparsed(
        client, memory, adapter, stored_state):
    """90,000 empty tensors in a 7 MB header: its JSON used to become 80 MiB of objects. A LoRA
    of the 2-layer test base has at most 32 tensors: 2 per module of its table in each layer
    (7 per layer), and 2 each for the input and output embeddings."""
    before, start = stored_state(), memory.reset_peak()

    response = send(client, doc.many_tensors(adapter, 90_000))

    assert_refused(response, 422, "header_too_large", "exceeds the limit of 278528 bytes")
    assert "has at most 32 tensors" in response.json()["error"]["hint"]
    assert_unharmed(client, memory, stored_state, before, since=start, bound_mb=ATTACK_RSS_GROWTH_MB)


def test_bytes_after_the_end_of_a_tar_are_not_decompressed_without_limit(client, memory, adapter,
                                                                         stored_state):
    """512 MiB of zeros after the end-of-archive marker, in half a MB of gzip."""
    before = stored_state()

    response = send(client, ar.tar_trailing(adapter, 512 * MiB, "gzip"))

    assert_refused(response, 400, "archive_trailing_data",
                   "a.tar.gz continues for more than 1048576 bytes after its end-of-archive marker")
    assert_unharmed(client, memory, stored_state, before)


def test_a_bzip2_tar_is_refused_without_decompressing_it(client, memory, adapter, stored_state):
    """The adapter and 64 MiB of zeros in 30 kB of bzip2: tarfile's "r:*" used to open it."""
    before = stored_state()
    attack = ar.tar_trailing(adapter, 64 * MiB, "bzip2")
    assert len(attack.body) < 64 * 1024

    response = send(client, attack)

    assert_refused(response, 415, "unsupported_compression", "a.tar.gz is compressed with bzip2")
    assert_unharmed(client, memory, stored_state, before)


class HealthProbe:
    """Polls /healthz from another connection while a request runs: how long others wait."""

    def __init__(self, url: str) -> None:
        self.url, self.seconds, self.stop = url, [], threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(base_url=self.url, timeout=120) as other:
            while not self.stop.is_set():
                started = time.monotonic()
                assert other.get("/healthz").status_code == 200
                self.seconds.append(time.monotonic() - started)

    def __enter__(self) -> "HealthProbe":
        self.thread.start()
        # Polling before the request starts: one answer in, the next probe follows at once.
        services.wait_for(lambda: self.seconds, timeout_s=60, what="the first /healthz answer")
        return self

    def __exit__(self, *_) -> None:
        answered = len(self.seconds)  # and one more probe answered after the request
        services.wait_for(lambda: len(self.seconds) > answered, timeout_s=60,
                          what="a /healthz answer after the request")
        self.stop.set()
        self.thread.join()


@pytest.mark.parametrize(("size", "entries", "status", "code", "message"), [
    (65_536, 3, 413, "archive_header_too_large",
     "a.tar.gz: a long-name or pax header of 65536 bytes exceeds the limit of 4096"),
    (4096, MAX_FILES, 400, "invalid_pax_header",
     "a.tar.gz: malformed pax header: record 1 does not start with its length and a space"),
], ids=["64KiB_x3", "4KiB_x16"])
def test_pax_headers_that_make_tarfile_backtrack_are_refused_at_once(
        capped, client, memory, stored_state, size, entries, status, code, message):
    """CVE-2024-6232 on this Python (3.11.7): tarfile's pax regexes backtrack quadratically over
    digits. Three 64 KiB pax headers of '1's, under 1 kB gzipped, used to keep one upload busy
    for 27.5 s with the GIL held, and /healthz then took up to 18.8 s for everyone else."""
    before = stored_state()
    attack = ar.tar_pax_digits(size, entries, "gzip")
    assert len(attack.body) < 4096

    with HealthProbe(capped.url) as health:
        started = time.monotonic()
        response = send(client, attack)
        elapsed = time.monotonic() - started

    assert_refused(response, status, code, message)
    assert elapsed < 1.0, f"the refusal took {elapsed:.2f} s"
    assert health.seconds and max(health.seconds) < 2.0, f"/healthz waited {max(health.seconds):.2f} s"
    assert_unharmed(client, memory, stored_state, before)


# --- every attack of the fixed corpus, which bench/hostile.py measures ----------------------


def test_every_attack_of_the_fixed_corpus_is_refused_cleanly(client, memory, adapter, stored_state):
    before = stored_state()

    for attack in grid(adapter, max_upload_bytes=MAX_UPLOAD_BYTES, max_files=MAX_FILES):
        send(client, attack)

    assert_unharmed(client, memory, stored_state, before)


# --- generated attacks, family by family ----------------------------------------------------

sizes_over_header_limit = st.integers(4097, 160_000_000)
compressions = st.sampled_from(["gzip", "none"])


def pax_payloads() -> st.SearchStrategy[bytes]:
    """Pax headers: raw bytes, and records whose parts (length, keyword, value) are each drawn
    right or wrong, so the parser meets near misses as well as noise."""
    def record(length_delta: int, keyword: bytes, value: bytes) -> bytes:
        text = b" " + keyword + b"=" + value + b"\n"
        length = len(text) + 1
        while len(str(length)) + len(text) != length:  # the length counts its own digits
            length = len(str(length)) + len(text)
        return str(max(length + length_delta, 0)).encode() + text

    keywords = st.sampled_from([b"path", b"size", b"mtime", b"hdrcharset", b"GNU.sparse.name", b"", b"a b",
                                b"linkpath", b"SCHILY.xattr.user.x"])
    values = st.one_of(st.binary(max_size=300), st.sampled_from([b"1" * 3000, b"-1", b"1.5", b"BINARY"]))
    records = st.lists(st.builds(record, st.sampled_from([0, 0, 0, -1, 1, 1000]), keywords, values),
                       max_size=40).map(b"".join)
    return st.one_of(st.binary(max_size=5000), records)


def archive_attacks(adapter: Adapter) -> st.SearchStrategy[Attack]:
    return st.one_of(
        st.builds(ar.tar_long_name, sizes_over_header_limit, st.sampled_from(["gnu", "pax"]), st.just("gzip")),
        st.builds(ar.tar_long_name, st.integers(1, UNDER_LIMIT), st.sampled_from(["gnu", "pax"]), st.just("none")),
        st.builds(ar.tar_header_chain, st.integers(1, 6000), compressions),
        st.builds(ar.tar_sparse_map, st.integers(1, 2_000_000), st.just("gzip")),
        st.builds(ar.tar_pax_digits, st.integers(1, 200_000), st.integers(1, MAX_FILES), compressions),
        st.builds(ar.tar_pax_payload, pax_payloads(), compressions),
        st.builds(ar.tar_old_sparse, st.integers(1, 200_000), st.just("gzip")),
        st.builds(ar.tar_trailing, st.just(adapter), st.integers(2 * MiB, 128 * MiB), st.just("gzip"),
                  st.sampled_from([b"\0", b"\x5a"])),
        st.builds(ar.tar_trailing, st.just(adapter), st.integers(0, 64 * MiB), st.sampled_from(["bzip2", "xz"])),
        st.builds(ar.tar_after_gzip, st.just(adapter),
                  st.sampled_from(["garbage", "second_member", "zero_then_garbage"])),
        st.builds(ar.tar_bomb, st.integers(MAX_UPLOAD_BYTES + 1, 2**33 - 1), compressions),
        st.builds(ar.tar_many, st.integers(MAX_FILES + 1, 20_000), st.just("gzip")),
        st.builds(ar.tar_special, st.just(adapter), st.sampled_from(sorted(ar.TAR_SPECIALS)), compressions),
        st.builds(ar.tar_truncated, st.just(adapter), st.integers(0, 999)),
        st.builds(ar.zip_directory, st.integers(MAX_FILES + 1, UNDER_LIMIT // 47), st.integers(0, 0xFFFF)),
        st.builds(ar.zip_bomb, st.just(adapter), st.integers(MAX_UPLOAD_BYTES + 1, 16 * MAX_UPLOAD_BYTES)),
        st.builds(ar.zip_lying_size, st.just(adapter), st.integers(1, 100_000)),
        st.builds(ar.zip_method, st.just(adapter), st.sampled_from([12, 14, 1, 6, 9, 98, 99])),
        st.builds(ar.zip_long_fields, st.integers(1025, 65_535), st.integers(0, 65_535)),
        st.builds(ar.zip_long_fields, st.integers(1, 65_535), st.integers(16_385, 65_535)),
        st.builds(ar.zip_special, st.just(adapter), st.sampled_from(ar.ZIP_SPECIALS)),
        st.builds(ar.junk, st.sampled_from(["a.zip", "a.tar", "a.tar.gz", "a.tgz"]),
                  st.integers(0, 200_000), st.integers(0, 2**32)),
    )


def multipart_attacks(adapter: Adapter) -> st.SearchStrategy[Attack]:
    return st.one_of(
        st.builds(mp.many_parts, st.just(adapter), st.integers(1, 3000), st.booleans()),
        st.builds(mp.long_part_header, st.just(adapter), st.integers(8193, UNDER_LIMIT)),
        st.builds(mp.many_part_headers, st.just(adapter), st.integers(16, 20_000)),
        st.builds(mp.filename, st.just(adapter), st.sampled_from(sorted(mp.HOSTILE_FILENAMES))),
        st.builds(mp.truncated, st.just(adapter), st.integers(0, 999)),
        st.builds(mp.fields, st.just(adapter), st.sampled_from(mp.FIELD_VARIANTS)),
        st.builds(mp.framing, st.just(adapter), st.sampled_from(mp.FRAMINGS)),
    )


def config_attacks(adapter: Adapter) -> st.SearchStrategy[Attack]:
    return st.one_of(
        st.builds(doc.config_non_finite, st.just(adapter), st.sampled_from(doc.CONFIG_FIELDS),
                  st.sampled_from(doc.NON_FINITE), st.booleans()),
        st.builds(doc.config_deep, st.just(adapter), st.integers(1, 400_000), st.sampled_from(["[", "{"])),
        st.builds(doc.config_big_int, st.just(adapter), st.sampled_from(doc.CONFIG_FIELDS),
                  st.integers(4301, 400_000)),
        st.builds(doc.config_long_string, st.just(adapter),
                  st.sampled_from(["base_model_name_or_path", "target_modules", "peft_type"]),
                  st.integers(201, 2 * MiB)),
        st.builds(doc.config_duplicate_key, st.just(adapter), st.sampled_from(sorted(adapter.config))),
        st.builds(doc.config_encoding, st.just(adapter), st.sampled_from(doc.CONFIG_ENCODINGS)),
        st.builds(doc.config_regex, st.just(adapter), st.sampled_from(doc.HOSTILE_REGEXES)),
        st.builds(doc.config_oversized, st.just(adapter), st.integers(0, 2 * MiB)),
    )


def safetensors_attacks(adapter: Adapter) -> st.SearchStrategy[Attack]:
    fields = st.sampled_from(sorted(doc.TENSOR_FIELD_VALUES)).flatmap(
        lambda field: st.tuples(st.just(field), st.sampled_from(doc.TENSOR_FIELD_VALUES[field])))
    return st.one_of(
        st.builds(doc.header_length_lie, st.just(adapter), st.integers(0, 2**64 - 1)),
        st.builds(doc.many_tensors, st.just(adapter), st.integers(1, 90_000)),
        fields.map(lambda pair: doc.tensor_field(adapter, *pair)),
        st.builds(doc.header_shape, st.just(adapter), st.sampled_from(doc.HEADER_SHAPES)),
        st.builds(doc.data_length, st.just(adapter), st.integers(-len(adapter.weights) + 1, 64 * 1024)),
        st.builds(doc.tiny_file, st.just(adapter), st.integers(0, len(adapter.weights) - 1)),
    )


FAMILIES = {"archives": archive_attacks, "multipart": multipart_attacks, "config": config_attacks,
            "safetensors": safetensors_attacks}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_generated_attack_is_refused_cleanly(client, memory, adapter, stored_state, family):
    before = stored_state()

    @EXAMPLES
    @given(attack=FAMILIES[family](adapter))
    def attack_is_refused(attack: Attack) -> None:
        send(client, attack)

    attack_is_refused()

    assert_unharmed(client, memory, stored_state, before)
