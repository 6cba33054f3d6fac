"""An upload's validation rules on bytes alone (peft_config, safetensors_check): no database, no
store. The same refusals through the API, with nothing stored, are in test_bad_uploads.py."""

from __future__ import annotations

import io
import json
import struct

import pytest

from registry.adapters import peft_config, safetensors_check
from registry.errors import Unprocessable

pytestmark = pytest.mark.fast
GOOD = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"],
        "base_model_name_or_path": "tiny", "bias": "none"}
LIMIT = safetensors_check.HeaderLimit(size=4096, reason="the base's module table")


def _config(**changes) -> bytes:
    config = {**GOOD, **changes}
    return json.dumps({k: v for k, v in config.items() if v is not ...}).encode()


def _refusal(call) -> Unprocessable:
    with pytest.raises(Unprocessable) as refused:
        call()
    return refused.value


def test_a_good_config_is_read_into_its_spec():
    spec = peft_config.parse_config(_config())
    assert (spec.r, spec.lora_alpha, spec.target_modules, spec.base_model_name) == (
        8, 16.0, ("q_proj", "v_proj"), "tiny")


@pytest.mark.parametrize("data, code, says", [
    (b"  ", "empty_file", "the file is empty"),
    (_config(peft_type="IA3"), "unsupported_peft_type", "peft_type is 'IA3'; only LORA adapters"),
    (_config(r=0), "invalid_config", "r must be a positive integer, got '0'"),
    (_config(r=True), "invalid_config", "r must be a positive integer, got 'True'"),
    (_config(r=1024), "rank_too_large", "r is 1024, above the largest rank vLLM supports"),
    (_config(lora_alpha=float("inf")), "invalid_config", "lora_alpha is Infinity, which is not a finite number"),
    (_config(lora_alpha=-1), "invalid_config", "lora_alpha must be a positive, finite number, got '-1'"),
    (_config(r=...), "missing_field", "r is missing"),
    (_config(bias="all"), "bias_unsupported", "bias is 'all'; vLLM only serves adapters with bias 'none'"),
    (_config(base_model_name_or_path=...), "missing_field", "base_model_name_or_path is missing"),
    (_config(target_modules=[]), "missing_field", "target_modules is missing"),
    (_config(rank_pattern={"q_proj": 0}), "invalid_config", "rank_pattern gives 'q_proj' a value that is not accepted"),
    (b"[1, 2]", "invalid_config", "must be a JSON object"),
])
def test_a_bad_config_is_refused_with_its_code_and_reason(data, code, says):
    refused = _refusal(lambda: peft_config.parse_config(data))
    assert refused.status == 422 and refused.code == code
    assert refused.message.startswith("adapter_config.json: ") and says in refused.message


def _safetensors(header: dict, data: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def _read(blob: bytes):
    return safetensors_check.read_tensors(io.BytesIO(blob), len(blob), LIMIT)


def test_tensors_that_tile_the_data_exactly_are_read():
    blob = _safetensors({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8)
    assert [t.name for t in _read(blob)] == ["a"]


@pytest.mark.parametrize("blob, code, says", [
    (b"", "empty_file", "the file is empty"),
    (b"\x01\x02", "invalid_safetensors", "shorter than the 8-byte header length"),
    (struct.pack("<Q", 10**12) + b"{}", "header_too_large", "header length 1000000000000 exceeds the limit of 4096"),
    (struct.pack("<Q", 100) + b"{}", "invalid_safetensors", "the header claims 100 bytes but only 2 follow"),
])
def test_a_bad_header_is_refused_before_it_is_parsed(blob, code, says):
    refused = _refusal(lambda: _read(blob))
    assert refused.code == code and says in refused.message


def test_tensors_that_leave_a_gap_in_the_data_are_refused():
    blob = _safetensors({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 8)
    assert _refusal(lambda: _read(blob)).code == "invalid_safetensors"
