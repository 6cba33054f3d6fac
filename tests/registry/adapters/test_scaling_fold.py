"""rank_pattern / alpha_pattern adapters: accepted as uploaded (vLLM 0.32 reads the patterns), or,
opt-in per upload, served as a derived plain adapter with the scaling folded into lora_B. The
derived bytes compute what peft computes from the upload; both are kept, each under its own
digest, and the version names the upload it was derived from. The engine-side proof is in
tests/workers/test_family_parity.py."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from devkit.family_models import build_adapter
from signed_digests.digests import manifest_digest
from tests.conftest import BASE_NAME
from tests.support.asserts import assert_refused
from tests.web.test_review import web_session

PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")
PATTERNS = {"rank_pattern": {"v_proj": 8}, "alpha_pattern": {"o_proj": 32, r"layers\.1\.self_attn\.q_proj": 2}}


@pytest.fixture(scope="module")
def patterned(tiny_base, tmp_path_factory) -> Path:
    """A real peft adapter whose modules have three ranks-and-alphas between them."""
    folder = build_adapter(tiny_base, tmp_path_factory.mktemp("patterned") / "adapter", seed=7, r=4,
                           lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"], **PATTERNS)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": BASE_NAME}))
    return folder


def upload(client, name: str, folder: Path, **fields):
    return client.post(f"/v1/adapters/acme/{name}/versions", data=fields,
                       files=[("file", (file, (folder / file).read_bytes())) for file in PEFT_FILES])


def fetch(client, name: str, number: int, artifact: str, into: Path) -> dict:
    listing = client.get(f"/v1/adapters/acme/{name}/versions/{number}/download", params={"artifact": artifact})
    assert listing.status_code == 200, listing.text
    into.mkdir()
    for entry in listing.json()["files"]:
        (into / entry["name"]).write_bytes(httpx.get(entry["url"]).content)
    return listing.json()


def logits(tiny_base: Path, adapter: Path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32)
    with torch.inference_mode():
        return PeftModel.from_pretrained(copy.deepcopy(base), adapter)(
            input_ids=torch.tensor([[5, 9, 33, 12, 80, 7, 41]])).logits


def test_a_pattern_adapter_is_accepted_as_uploaded(uploader, base_model, patterned):
    response = upload(uploader, "patterned-as-is", patterned)

    assert response.status_code == 201, response.text
    version = response.json()
    assert version["derived_from"] is None
    assert version["rank"] == 8  # the largest a module has: what the pool's max_lora_rank must hold
    config = {entry["name"]: entry for entry in version["files"]}["adapter_config.json"]
    assert config["sha256"] == hashlib.sha256((patterned / "adapter_config.json").read_bytes()).hexdigest()


def test_the_folded_artifact_computes_what_peft_computes_from_the_upload(uploader, base_model, patterned,
                                                                        tiny_base, tmp_path):
    response = upload(uploader, "patterned-folded", patterned, fold_scaling="true")

    assert response.status_code == 201, response.text
    version = response.json()
    uploaded = [{"name": name, "sha256": hashlib.sha256((patterned / name).read_bytes()).hexdigest(),
                 "size": (patterned / name).stat().st_size} for name in PEFT_FILES]
    assert version["derived_from"] == {"digest": manifest_digest(uploaded), "files": uploaded,
                                       "transform": "fold_scaling/1"}
    assert version["digest"] != version["derived_from"]["digest"]
    served = fetch(uploader, "patterned-folded", 1, "served", tmp_path / "served")
    assert served["digest"] == version["digest"]
    config = json.loads((tmp_path / "served" / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["rank_pattern"], config["alpha_pattern"]) == (8, 16, {}, {})
    # q_proj of layer 0 keeps its scaling (8 / 4): only zeros are added; o_proj's lora_B is scaled
    # by its own 32 / 4 over that.
    weights, original = (load_file(folder / PEFT_FILES[1]) for folder in (tmp_path / "served", patterned))
    q_b, o_b = (f"base_model.model.model.layers.0.self_attn.{m}.lora_B.weight" for m in ("q_proj", "o_proj"))
    assert np.array_equal(weights[q_b][:, :4], original[q_b]) and not weights[q_b][:, 4:].any()
    np.testing.assert_allclose(weights[o_b][:, :4], original[o_b] * 4, rtol=1e-6)

    gap = (logits(tiny_base, tmp_path / "served") - logits(tiny_base, patterned)).abs().max().item()
    assert gap < 1e-4
    as_uploaded = fetch(uploader, "patterned-folded", 1, "uploaded", tmp_path / "uploaded")
    assert as_uploaded["digest"] == version["derived_from"]["digest"]
    for name in PEFT_FILES:
        assert (tmp_path / "uploaded" / name).read_bytes() == (patterned / name).read_bytes()


def test_the_dashboard_names_both_digests(uploader, base_model, patterned, registry, tokens):
    version = upload(uploader, "patterned-shown", patterned, fold_scaling="true").json()
    client, _ = web_session(registry.url, tokens["acme_reviewer"])

    page = client.get("/ui/adapters/acme/patterned-shown/versions/1")

    assert page.status_code == 200
    assert (f"served digest <code>{version['digest'][:16]}…</code>, uploaded digest "
            f"<code>{version['derived_from']['digest'][:16]}…</code>") in " ".join(page.text.split())


def test_folding_again_is_the_same_version_and_plain_adapters_have_nothing_to_fold(
        uploader, base_model, patterned, make_adapter):
    first = upload(uploader, "patterned-twice", patterned, fold_scaling="true")
    again = upload(uploader, "patterned-twice", patterned, fold_scaling="true")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["digest"] == first.json()["digest"]

    plain = make_adapter(seed=44)
    folded = upload(uploader, "plain-fold", plain, fold_scaling="true")
    unfolded = upload(uploader, "plain-fold", plain)
    assert (folded.status_code, unfolded.status_code) == (201, 200)  # one version: the upload itself
    assert folded.json()["derived_from"] is None


def test_an_unreadable_fold_field_is_refused_before_anything_is_stored(uploader, base_model, patterned,
                                                                      stored_state):
    before = stored_state()
    response = upload(uploader, "patterned-bad-field", patterned, fold_scaling="yes")

    assert_refused(response, 422, "invalid_field", "fold_scaling is 'yes'; it must be true or false")
    assert stored_state() == before


def test_a_fold_that_overflows_the_dtype_is_refused_with_nothing_stored(uploader, base_model, patterned,
                                                                       tmp_path, stored_state):
    folder = tmp_path / "half"
    folder.mkdir()
    save_file({name: array.astype(np.float16) for name, array in load_file(patterned / PEFT_FILES[1]).items()},
              folder / PEFT_FILES[1], metadata={"format": "pt"})
    config = json.loads((patterned / "adapter_config.json").read_text())
    config["alpha_pattern"] = {"o_proj": 8e6}  # a million times the default scaling
    (folder / "adapter_config.json").write_text(json.dumps(config))
    before = stored_state()

    response = upload(uploader, "patterned-overflow", folder, fold_scaling="true")

    assert_refused(response, 422, "fold_overflow", "cannot fold 'model.layers.0.self_attn.o_proj': its "
                                                   "scaling (1e+06 times the default) takes lora_B beyond "
                                                   "the range of F16")
    assert stored_state() == before


def test_a_fold_that_would_outgrow_the_upload_limit_is_refused_before_it_is_written(patterned, tiny_base,
                                                                                    tmp_path):
    """Padding multiplies the size by the largest rank over the smallest (512 for r=1 beside a
    rank-512 module), so the derived weights are held to the upload limit."""
    from devkit.family_parity import table_of
    from registry.adapters import lora_layout, peft_config, safetensors_check, scaling_fold
    from registry.adapters.validation import header_limit
    from registry.errors import PayloadTooLarge

    table = table_of(tiny_base)
    spec = peft_config.parse_config((patterned / PEFT_FILES[0]).read_bytes())
    weights = patterned / PEFT_FILES[1]
    with weights.open("rb") as file:
        tensors = safetensors_check.read_tensors(file, weights.stat().st_size, header_limit(table, 2**24))
    layout = lora_layout.check_layout(tensors, spec, table)
    fits = scaling_fold.fold(spec, layout, weights, tmp_path, max_bytes=2**30).weights
    size = fits.stat().st_size
    fits.unlink()

    with pytest.raises(PayloadTooLarge) as refused:
        scaling_fold.fold(spec, layout, weights, tmp_path, max_bytes=size - 1)

    assert refused.value.code == "fold_too_large"
    assert refused.value.message == (f"folding the scaling pads every module to rank 8: the served weights "
                                     f"would be {size} bytes, more than the {size - 1} an upload may be")
    assert list(tmp_path.iterdir()) == []
    assert scaling_fold.fold(spec, layout, weights, tmp_path, max_bytes=size).weights.stat().st_size == size


def test_3d_experts_of_different_ranks_are_served_as_uploaded_but_not_folded(tmp_path):
    """GPT-OSS keeps its experts in 3-D parameters, which vLLM takes whole: rank_pattern gives
    gate_up_proj rank 8 beside down_proj's 4. The pattern is read as peft reads it, and the fold,
    which pads 2-D LoRAs only, refuses to guess how a 3-D one's rank rows are laid out."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from devkit.family_parity import folded, registry_verdict, table_of
    from registry.errors import Unprocessable

    config = AutoConfig.for_model("gpt_oss", hidden_size=64, intermediate_size=64, num_attention_heads=4,
                                  num_key_value_heads=2, head_dim=16, num_hidden_layers=2, vocab_size=128,
                                  num_local_experts=4, num_experts_per_tok=2, layer_types=["full_attention"] * 2)
    config.architectures = ["GptOssForCausalLM"]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(tmp_path / "base")
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], init_lora_weights=False,
                      target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
                      rank_pattern={"gate_up_proj": 8})
    get_peft_model(model, lora).save_pretrained(tmp_path / "adapter")
    saved = json.loads((tmp_path / "adapter" / PEFT_FILES[0]).read_text())
    (tmp_path / "adapter" / PEFT_FILES[0]).write_text(json.dumps({**saved, "base_model_name_or_path": "oss"}))
    table = table_of(tmp_path / "base")

    assert registry_verdict(table, tmp_path / "adapter") == ("accepted", "")
    with pytest.raises(Unprocessable) as refused:
        folded(table, tmp_path / "adapter", tmp_path / "folded")
    assert refused.value.code == "fold_unsupported"
    assert refused.value.message == ("cannot fold 'model.layers.0.mlp.experts.down_proj': its rank 4 differs "
                                     "from the largest, 8, and the rank rows of 3-D expert LoRAs are not padded")


def test_a_signed_and_an_unsigned_fold_of_one_adapter_stay_two_versions(engine, client_with, base_model,
                                                                       patterned, tmp_path):
    """The signature signs the uploaded files; it is a file of the served artifact too, so the
    signed upload does not collapse into the unsigned one's version (nor lose its signature)."""
    from tests.registry.signing_keys_support import add_key, new_key, new_tenant, sign

    tenant = new_tenant(engine, client_with, "folding")
    key = new_key()
    add_key(tenant.admin, tenant.name, "team-f", key)
    files = {name: (patterned / name).read_bytes() for name in PEFT_FILES}
    signature = sign(files, key, tmp_path)

    def push(with_signature: bool):
        sent = {**files, "model.sig": signature} if with_signature else files
        return tenant.uploader.post(f"/v1/adapters/{tenant.name}/folded/versions", data={"fold_scaling": "true"},
                                    files=[("file", (name, data)) for name, data in sent.items()])

    signed, unsigned = push(True), push(False)

    assert (signed.status_code, unsigned.status_code) == (201, 201), (signed.text, unsigned.text)
    assert (signed.json()["number"], unsigned.json()["number"]) == (1, 2)
    assert signed.json()["upload_signature"]["key_name"] == "team-f"
    assert unsigned.json()["upload_signature"] is None
    for version in (signed.json(), unsigned.json()):
        names = [[entry["name"] for entry in files] for files in (version["files"], version["derived_from"]["files"])]
        assert names[0] == names[1]  # the served files and the uploaded ones: the same names
    assert "model.sig" in [entry["name"] for entry in signed.json()["files"]]
