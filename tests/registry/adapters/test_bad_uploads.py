"""Every refused upload answers with the exact status, code and message, and stores nothing."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import MAX_UPLOAD_BYTES
from tests.support import forge
from tests.support.asserts import assert_refused

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
Q_A = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
Q_B = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"


@dataclass
class Valid:
    """A real PEFT adapter, as parts that each case damages in one way."""

    config: dict
    tensors: dict[str, np.ndarray]
    weights: bytes

    def files(self, config=None, weights=None) -> list[tuple[str, bytes]]:
        config_bytes = config if isinstance(config, bytes) else json.dumps(config or self.config).encode()
        return [(CONFIG, config_bytes), (WEIGHTS, self.weights if weights is None else weights)]

    def with_config(self, **changes) -> list[tuple[str, bytes]]:
        return self.files(config={**self.config, **changes})

    def with_raw(self, field: str, raw_json: str) -> list[tuple[str, bytes]]:
        """The config with one field written as this JSON text, which json.dumps cannot write."""
        text = json.dumps({**self.config, field: "@raw@"}).replace('"@raw@"', raw_json)
        return self.files(config=text.encode())

    def with_tensors(self, change: Callable[[dict], None]) -> list[tuple[str, bytes]]:
        tensors = {name: array.copy() for name, array in self.tensors.items()}
        change(tensors)
        return self.files(weights=forge.encode(tensors))

    def with_header(self, edit) -> list[tuple[str, bytes]]:
        return self.files(weights=forge.encode(self.tensors, edit_header=edit))


def rename(old: str, new: str):
    def change(tensors: dict) -> None:
        tensors[new] = tensors.pop(old)
    return change


def set_value(name: str, value: float):
    def change(tensors: dict) -> None:
        tensors[name][0, 0] = value
    return change


def replace(name: str, array: np.ndarray):
    def change(tensors: dict) -> None:
        tensors[name] = array
    return change


def ride_along(layer: str):
    """A rank-64 pair for layer 0's q_proj under another spelling of the layer number, before
    the real rank-8 pair: when both spellings meant one module, only the last pair was checked."""
    def change(tensors: dict) -> None:
        spelled = {Q_A.replace("layers.0.", f"layers.{layer}."): np.zeros((64, 128), np.float32),
                   Q_B.replace("layers.0.", f"layers.{layer}."): np.zeros((128, 64), np.float32)}
        originals = dict(tensors)
        tensors.clear()
        tensors.update({**spelled, **originals})
    return change


def overlap(header: dict) -> None:
    last = max(header.values(), key=lambda entry: entry["data_offsets"][0])
    last["data_offsets"] = [o - 4 for o in last["data_offsets"]]


def beyond_end(header: dict) -> None:
    last = max(header.values(), key=lambda entry: entry["data_offsets"][1])
    last["data_offsets"][1] += 1024


def tar_of(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def tar_member(name: str, data: bytes = b"x", kind: bytes = tarfile.REGTYPE, link: str = ""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data if kind == tarfile.REGTYPE else None


def tar_bomb() -> bytes:
    """One member that declares far more than the limit: refused at its header."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo(WEIGHTS)
        info.size = 64 * MAX_UPLOAD_BYTES
        tar.addfile(info, io.BytesIO(b"\0" * info.size))
    return buffer.getvalue()


def zip_of(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def corrupt_gzip(data: bytes) -> bytes:
    """Flip a byte of the gzip trailer's CRC: every member reads, the stream does not verify."""
    return data[:-8] + bytes([data[-8] ^ 0xFF]) + data[-7:]


def zip_bomb() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(CONFIG, b"{}")
        archive.writestr(WEIGHTS, b"\0" * (8 * MAX_UPLOAD_BYTES))
    assert len(buffer.getvalue()) < MAX_UPLOAD_BYTES / 50
    return buffer.getvalue()


# (id, files(valid) -> parts, extra form data, status, code, text the message must contain)
CASES = [
    ("truncated", lambda v: v.files(weights=v.weights[:-100]), {}, 422, "invalid_safetensors",
     "beyond the end of the data"),
    ("header_length_oversized", lambda v: v.files(weights=(2**40).to_bytes(8, "little") + v.weights[8:]),
     {}, 422, "header_too_large", "header length 1099511627776 exceeds"),
    ("header_longer_than_file", lambda v: v.files(weights=(len(v.weights)).to_bytes(8, "little")
                                                  + v.weights[8:]), {}, 422, "invalid_safetensors",
     "the file is truncated"),
    ("offsets_beyond_end", lambda v: v.with_header(beyond_end), {}, 422, "invalid_safetensors",
     "beyond the end of the data"),
    ("overlapping_tensors", lambda v: v.with_header(overlap), {}, 422, "invalid_safetensors", "overlaps"),
    ("duplicate_tensor_name", lambda v: v.files(weights=forge.encode(
        v.tensors, header_text=lambda t: t.replace("{", "{" + json.dumps(Q_A) + ": "
                                                   + json.dumps({"dtype": "F32", "shape": [0],
                                                                 "data_offsets": [0, 0]}) + ", ", 1))),
     {}, 422, "invalid_safetensors", "more than once"),
    ("nan", lambda v: v.with_tensors(set_value(Q_A, np.nan)), {}, 422, "non_finite_weights", Q_A),
    ("inf", lambda v: v.with_tensors(set_value(Q_B, np.inf)), {}, 422, "non_finite_weights", Q_B),
    ("inf_bf16", lambda v: v.with_tensors(lambda t: t.update(
        {n: (a.view(np.uint32) >> 16).astype(np.uint16) | (np.uint16(0x7F80) if n == Q_A else 0)
         for n, a in t.items()})), {}, 422, "non_finite_weights", Q_A),
    ("int8_dtype", lambda v: v.with_tensors(lambda t: t.update(
        {n: a.astype(np.int8) for n, a in t.items()})), {}, 422, "unsupported_dtype", "dtype I8"),
    ("dtype_not_a_string", lambda v: v.with_header(lambda h: h[Q_A].update(dtype=["F32"])), {}, 422,
     "invalid_safetensors", f"tensor {Q_A!r} has unknown dtype ['F32']"),
    ("float64_dtype", lambda v: v.with_tensors(replace(Q_A, np.zeros((8, 128), np.float64))), {},
     422, "unsupported_dtype", "dtype F64"),
    ("wrong_shape", lambda v: v.with_tensors(replace(Q_A, np.zeros((8, 100), np.float32))), {},
     422, "shape_mismatch", "expected lora_A (8, 128)"),
    ("rank_mismatch_a_b", lambda v: v.with_tensors(replace(Q_B, np.zeros((128, 4), np.float32))), {},
     422, "rank_mismatch", "lora_A has rank 8 but lora_B has rank 4"),
    ("config_rank_disagrees", lambda v: v.with_config(r=4), {}, 422, "config_rank_mismatch",
     "adapter_config.json says 4"),
    ("missing_b", lambda v: v.with_tensors(lambda t: t.pop(Q_B)), {}, 422, "incomplete_pair",
     "no lora_B tensor"),
    ("unknown_module", lambda v: v.with_tensors(rename(Q_A, Q_A.replace("q_proj", "x_proj"))), {},
     422, "unknown_module", "self_attn.x_proj"),
    ("not_a_lora_tensor", lambda v: v.with_tensors(replace("base_model.model.lm_head.weight",
                                                           np.zeros((2, 2), np.float32))), {},
     422, "unknown_tensor", "lm_head"),
    ("layer_beyond_base", lambda v: v.with_tensors(rename(Q_A, Q_A.replace("layers.0", "layers.7"))),
     {}, 422, "layer_out_of_range", "layer 7, but the base has 2 layers"),
    ("untargeted_module", lambda v: v.with_config(target_modules=["q_proj"]), {}, 422,
     "untargeted_module", "v_proj"),
    ("target_without_tensors", lambda v: v.with_config(target_modules=["q_proj", "v_proj", "k_proj"]),
     {}, 422, "target_without_tensors", "targets 'model.layers.0.self_attn.k_proj', but no tensor is saved"),
    ("dora", lambda v: v.with_config(use_dora=True), {}, 422, "dora_unsupported", "use_dora"),
    ("bias", lambda v: v.with_config(bias="all"), {}, 422, "bias_unsupported", "bias is 'all'"),
    ("modules_to_save", lambda v: v.with_config(modules_to_save=["lm_head"]), {}, 422,
     "modules_to_save_unsupported", "modules_to_save"),
    ("not_lora", lambda v: v.with_config(peft_type="PREFIX_TUNING"), {}, 422, "unsupported_peft_type",
     "PREFIX_TUNING"),
    ("alpha_as_string", lambda v: v.with_config(lora_alpha="16"), {}, 422, "invalid_config",
     "lora_alpha must be a positive, finite number"),
    ("alpha_infinite", lambda v: v.files(config=json.dumps(v.config).replace('"lora_alpha": 16',
                                                                             '"lora_alpha": Infinity')
                                         .encode()), {}, 422, "invalid_config", "Infinity"),
    ("alpha_overflowing", lambda v: v.files(config=json.dumps(v.config).replace('"lora_alpha": 16',
                                                                                '"lora_alpha": 1e400')
                                            .encode()), {}, 422, "invalid_config", "finite"),
    ("config_deeply_nested", lambda v: v.files(config=b'{"peft_type": ' + b"[" * 100_000 + b"]" * 100_000
                                               + b"}"), {}, 422, "invalid_config", "not valid JSON"),
    # peft would build v_proj at rank 4 and fail to load its rank-8 weights.
    ("rank_pattern_disagrees_with_weights", lambda v: v.with_config(rank_pattern={"v_proj": 4}), {}, 422,
     "config_rank_mismatch", "module 'model.layers.0.self_attn.v_proj' has rank 8 but adapter_config.json "
                             "says 4"),
    ("rank_pattern_zero", lambda v: v.with_config(rank_pattern={"v_proj": 0}), {}, 422, "invalid_config",
     "rank_pattern gives 'v_proj' a value that is not accepted: r must be a positive integer, got '0'"),
    ("rank_pattern_too_large", lambda v: v.with_config(rank_pattern={"v_proj": 1024}), {}, 422,
     "rank_too_large", "rank_pattern gives 'v_proj' a value that is not accepted: r is 1024, above the "
                       "largest rank vLLM supports (512)"),
    ("alpha_pattern_text", lambda v: v.with_config(alpha_pattern={"q_proj": "64"}), {}, 422, "invalid_config",
     "alpha_pattern gives 'q_proj' a value that is not accepted: lora_alpha must be a positive, finite number"),
    ("rank_pattern_not_an_object", lambda v: v.with_config(rank_pattern=["v_proj"]), {}, 422,
     "config_option_refused", "rank_pattern is [\"v_proj\"]; it must be an object of at most 64 "
                              "module-name patterns, or null"),
    # peft matches pattern keys with `re`, without a timeout, when the evaluation loads the adapter.
    ("rank_pattern_catastrophic_key", lambda v: v.with_config(rank_pattern={"(.*)*x": 8}), {}, 422,
     "invalid_config", "rank_pattern key '(.*)*x' regex is too complex to compile safely: it repeats a "
                       "group that itself holds an unbounded repeat"),
    ("alpha_pattern_slow_key", lambda v: v.with_config(alpha_pattern={"(.|.)*[A-Z]": 8}), {}, 422,
     "invalid_config", "adapter_config.json: a key of alpha_pattern is a regex too slow to evaluate"),
    # Keys peft's re cannot compile in the form it uses, (.*\.)?(key)$, though the key alone compiles.
    ("pattern_key_with_verbose_flag", lambda v: v.with_config(rank_pattern={"(?x)q_proj#": 8}), {}, 422,
     "invalid_config", "rank_pattern key '(?x)q_proj#' is not a valid regex as peft uses it (global flags "
                       "not at the start of the expression"),
    ("pattern_key_with_case_flag", lambda v: v.with_config(alpha_pattern={"(?i)Q_PROJ": 8}), {}, 422,
     "invalid_config", "alpha_pattern key '(?i)Q_PROJ' is not a valid regex as peft uses it"),
    ("pattern_key_variable_lookbehind", lambda v: v.with_config(rank_pattern={r"(?<=self_attn\.|mlp\.)q_proj": 8}),
     {}, 422, "invalid_config", "is not a valid regex as peft uses it (look-behind requires fixed-width pattern"),
    ("pattern_key_naming_a_group", lambda v: v.with_config(rank_pattern={"(?P<m>q_proj)": 8}), {}, 422,
     "invalid_config", "rank_pattern key '(?P<m>q_proj)' regex is too complex to compile safely: a pattern key "
                       "may not name groups or refer back to them"),
    # re tries every way four .* can share a module path: seconds per path at nine.
    ("pattern_key_many_unbounded_repeats", lambda v: v.with_config(rank_pattern={".*" * 20 + "z": 8}), {}, 422,
     "invalid_config", "regex is too complex to compile safely: it has 20 unbounded repeats (*, + or {n,}; "
                       "at most 3)"),
    ("target_regex_many_unbounded_repeats", lambda v: v.with_config(target_modules=".*.*.*.*q_proj"), {}, 422,
     "invalid_config", "target_modules regex is too complex to compile safely: it has 4 unbounded repeats"),
    ("target_regex_variable_lookbehind", lambda v: v.with_config(target_modules=r".*(?<=self_attn\.|mlp\.)q_proj"),
     {}, 422, "invalid_config", "target_modules is not a valid regex as peft uses it (look-behind requires "
                                "fixed-width pattern"),
    ("slow_target_regex", lambda v: v.with_config(target_modules="(.|.)*[A-Z]"), {}, 422, "invalid_config",
     "too slow"),
    ("target_regex_large_repeats", lambda v: v.with_config(target_modules="(a{100}){100}"), {}, 422,
     "invalid_config", "target_modules regex is too complex to compile safely: its repeat counts "
                       "multiply out to more than 1000 pattern items"),
    ("target_regex_nested_plus", lambda v: v.with_config(target_modules="((a+)+)+"), {}, 422,
     "invalid_config", "target_modules regex is too complex to compile safely: it nests repeats 3 deep"),
    # The worker's peft matches with `re`, which has no timeout: nested unbounded repeats would hang it.
    ("target_regex_catastrophic", lambda v: v.with_config(target_modules=r"(.*)*x"), {}, 422,
     "invalid_config", "target_modules regex is too complex to compile safely: it repeats a group "
                       "that itself holds an unbounded repeat (such as (.*)*)"),
    ("target_regex_fuzzy_braces", lambda v: v.with_config(target_modules=r".*\.(q_proj|v_proj){e<=1}"), {},
     422, "invalid_config", "target_modules regex has a '{' or '}' that is not a repeat count"),
    ("target_regex_posix_class", lambda v: v.with_config(target_modules="[[:alpha:]._]+"), {}, 422,
     "invalid_config", "target_modules regex has '[' inside a character set"),
    ("target_regex_not_python_syntax", lambda v: v.with_config(target_modules=r"\p{L}+"), {}, 422,
     "invalid_config", "target_modules is not a valid regex (bad escape \\p"),
    ("number_overflows_to_infinity", lambda v: v.with_raw("lora_dropout", "1e999"), {}, 422,
     "invalid_config", "adapter_config.json: lora_dropout is 1e999, which is not a finite number"),
    ("nested_number_overflows", lambda v: v.with_raw("loftq_config", '{"bits": -1E+400}'), {}, 422,
     "invalid_config", "loftq_config.bits is -1E+400, which is not a finite number"),
    ("duplicate_config_key", lambda v: v.files(config=json.dumps(v.config)[:-1].encode() + b', "r": 8}'), {},
     422, "invalid_config", "adapter_config.json: key 'r' appears more than once in one object"),
    ("lone_surrogate_in_config", lambda v: v.files(config=json.dumps(
        {**v.config, "base_model_name_or_path": "tiny-llama\ud800"}).encode()), {}, 422, "invalid_config",
     "base_model_name_or_path holds a lone surrogate (tiny-llama\\ud800)"),
    ("layer_number_with_leading_zero", lambda v: v.with_tensors(ride_along("00")), {}, 422,
     "invalid_layer_number", f"tensor {Q_A.replace('.0.', '.00.')!r} writes its layer number as '00'"),
    ("layer_number_in_other_digits", lambda v: v.with_tensors(ride_along("\u0660")), {}, 422,
     "invalid_layer_number", "writes its layer number as '\u0660'"),
    ("mixed_dtypes", lambda v: v.with_tensors(lambda t: t.update(
        {n: a.astype(np.float16) for n, a in t.items() if "v_proj" in n})), {}, 422, "mixed_dtypes",
     "F16, F32"),
    ("rank_1024", lambda v: v.with_config(r=1024), {}, 422, "rank_too_large", "r is 1024"),
    ("missing_target_modules", lambda v: v.with_config(target_modules=None), {}, 422, "missing_field",
     "target_modules is missing"),
    ("wrong_base_model", lambda v: v.with_config(base_model_name_or_path="meta-llama/Llama-3-8B"),
     {"base_model": "tiny-llama"}, 422, "wrong_base_model", "'meta-llama/Llama-3-8B'"),
    ("unregistered_base_model", lambda v: v.with_config(base_model_name_or_path="someone/else"), {},
     422, "unknown_base_model", "'someone/else'"),
    ("config_not_json", lambda v: v.files(config=b"{r: 8,"), {}, 422, "invalid_config",
     "not valid JSON"),
    ("config_empty", lambda v: v.files(config=b""), {}, 422, "empty_file", "adapter_config.json"),
    ("weights_empty", lambda v: v.files(weights=b""), {}, 422, "empty_file", "adapter_model.safetensors"),
    ("missing_config", lambda v: v.files()[1:], {}, 422, "missing_file", "adapter_config.json is missing"),
    ("missing_weights", lambda v: v.files()[:1], {}, 422, "missing_file",
     "adapter_model.safetensors is missing"),
    ("pickle_bin", lambda v: [v.files()[0], ("adapter_model.bin", b"\x80\x04K\x01.")], {}, 415,
     "pickle_refused", "adapter_model.bin"),
    ("pickle_in_archive", lambda v: [("a.tar.gz", tar_of([tar_member(CONFIG, v.files()[0][1]),
                                                          tar_member("adapter_model.bin")]))],
     {}, 415, "pickle_refused", "adapter_model.bin"),
    ("tar_dotdot", lambda v: [("a.tar.gz", tar_of([tar_member("../../etc/" + CONFIG)]))], {}, 400,
     "unsafe_archive_path", "'../../etc/adapter_config.json'"),
    ("tar_absolute", lambda v: [("a.tar.gz", tar_of([tar_member("/etc/" + CONFIG)]))], {}, 400,
     "unsafe_archive_path", "'/etc/adapter_config.json'"),
    ("tar_symlink", lambda v: [("a.tar.gz", tar_of([tar_member(WEIGHTS, kind=tarfile.SYMTYPE,
                                                               link="/etc/shadow")]))], {}, 400,
     "archive_link", WEIGHTS),
    ("tar_hardlink", lambda v: [("a.tar.gz", tar_of([tar_member(WEIGHTS, kind=tarfile.LNKTYPE,
                                                                link="/etc/shadow")]))], {}, 400,
     "archive_link", WEIGHTS),
    ("zip_bomb", lambda v: [("bomb.zip", zip_bomb())], {}, 413, "archive_too_large", "expands to more"),
    ("tar_bomb", lambda v: [("bomb.tar.gz", tar_bomb())], {}, 413, "archive_too_large", "expands to more"),
    ("tar_too_many_entries", lambda v: [("many.tar.gz", tar_of([tar_member(f"f{i}") for i in range(17)]))],
     {}, 413, "too_many_files", "more than 16 entries"),
    ("zip_too_many_entries", lambda v: [("many.zip", zip_of({f"f{i}": b"x" for i in range(17)}))],
     {}, 413, "too_many_files", "more than 16 entries"),
    ("tar_corrupt_gzip", lambda v: [("a.tar.gz", corrupt_gzip(tar_of([tar_member(CONFIG, v.files()[0][1]),
                                                                      tar_member(WEIGHTS, v.weights)])))],
     {}, 400, "invalid_archive", "a.tar.gz is not a readable archive"),
    ("control_character_in_base_model", lambda v: v.files(), {"base_model": "tiny\x00llama"}, 422,
     "invalid_name", "base_model contains a control character"),
    ("not_an_archive", lambda v: [("a.zip", b"this is not a zip")], {}, 400, "invalid_archive", "a.zip"),
    ("over_size_limit", lambda v: v.files(weights=b"\0" * (MAX_UPLOAD_BYTES + 2 * 1024 * 1024)), {},
     413, "upload_too_large", f"the limit is {MAX_UPLOAD_BYTES}"),
    ("unexpected_file", lambda v: [*v.files(), ("notes.txt", b"hi")], {}, 415, "unexpected_file",
     "notes.txt"),
]


@pytest.fixture(scope="module")
def valid(make_adapter, base_model) -> Valid:
    folder = make_adapter(seed=3)
    weights = (folder / WEIGHTS).read_bytes()
    return Valid(json.loads((folder / CONFIG).read_text()), forge.load(weights), weights)


@pytest.mark.parametrize(("files", "data", "status", "code", "message"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_upload_is_refused_and_nothing_is_stored(uploader, valid, stored_state,
                                                     files, data, status, code, message):
    before = stored_state()

    response = uploader.post("/v1/adapters/acme/refused/versions",
                             files=[("file", part) for part in files(valid)], data=data)

    assert_refused(response, status, code, message)
    assert response.json()["error"]["hint"]
    assert stored_state() == before
    assert uploader.get("/v1/adapters/acme/refused").status_code == 404


def test_the_valid_baseline_is_accepted(uploader, valid):
    """Guards the table: each case differs from an upload that succeeds in exactly one way."""
    response = uploader.post("/v1/adapters/acme/baseline/versions",
                             files=[("file", part) for part in valid.files()])
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(("tenant", "name", "bad"), [("Acme!", "x", "tenant"), ("acme", "a..b", "adapter"),
                                                     ("acme", "-lead", "adapter")])
def test_bad_tenant_or_adapter_name_is_refused(client_for, valid, stored_state, tenant, name, bad):
    before = stored_state()
    response = client_for("global_admin").post(f"/v1/adapters/{tenant}/{name}/versions",
                                               files=[("file", part) for part in valid.files()])
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_name"
    assert f"invalid {bad} name" in response.json()["error"]["message"]
    assert stored_state() == before


def test_a_body_that_is_not_multipart_is_refused(uploader, stored_state):
    before = stored_state()
    response = uploader.post("/v1/adapters/acme/refused/versions", json={"file": "adapter"})
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert "multipart/form-data" in response.json()["error"]["message"]
    assert stored_state() == before


def test_a_boundary_longer_than_the_standard_allows_is_refused(uploader, valid, stored_state):
    """RFC 2046 allows 70 characters; the multipart parser raised its own error past 256."""
    before = stored_state()
    boundary = "b" * 300
    body = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n\r\n'
                    .encode() + data + b"\r\n" for name, data in valid.files()) + f"--{boundary}--\r\n".encode()

    response = uploader.post("/v1/adapters/acme/refused/versions", content=body,
                             headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})

    assert_refused(response, 400, "invalid_multipart", "malformed multipart body: the boundary is longer "
                                                        "than 70 bytes")
    assert stored_state() == before
    assert uploader.get("/readyz").status_code == 200


def test_unknown_form_field_is_refused(uploader, valid, stored_state):
    before = stored_state()
    response = uploader.post("/v1/adapters/acme/refused/versions",
                             files=[("file", part) for part in valid.files()], data={"tenant": "x"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_field"
    assert "'tenant'" in response.json()["error"]["message"]
    assert stored_state() == before


def refusals(admin, reason: str) -> float:
    for family in text_string_to_metric_families(admin.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "loraplane_upload_refusals_total" and sample.labels == {"reason": reason}:
                return sample.value
    return 0.0


def test_a_chunked_body_over_the_limit_is_refused(uploader, admin, stored_state):
    """Without a Content-Length the limit is enforced while the body streams in."""
    boundary = "limit-test"

    def body():
        yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
               f"filename=\"{WEIGHTS}\"\r\n\r\n").encode()
        for _ in range(MAX_UPLOAD_BYTES // (1024 * 1024) + 2):
            yield b"\0" * (1024 * 1024)
        yield f"\r\n--{boundary}--\r\n".encode()

    before, refused_before = stored_state(), refusals(admin, "upload_too_large")
    response = uploader.post("/v1/adapters/acme/chunked/versions", content=body(),
                             headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "upload_too_large"
    assert f"the limit is {MAX_UPLOAD_BYTES}" in response.json()["error"]["message"]
    assert stored_state() == before
    assert refusals(admin, "upload_too_large") == refused_before + 1
