"""Adapters of every family are checked against their base's module table, as vLLM judges them:
real peft adapters are taken, and each kind of module vLLM would not serve is refused, naming the
module and the reason, with nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from safetensors.numpy import load_file, save_file

from devkit.family_models import build_adapter, build_base, config_of
from tests.support.asserts import assert_refused

PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]


@pytest.fixture(scope="module")
def family_base(admin, tmp_path_factory):
    """A tiny random-weight base of the family, registered once, with its folder as an alias."""
    built: dict[str, Path] = {}

    def base(family: str) -> Path:
        if family not in built:
            folder = build_base(family, tmp_path_factory.mktemp(family) / "base")
            response = admin.post("/v1/base-models", json={
                "name": f"adapters-{family}", "config": config_of(family), "aliases": [str(folder)]})
            assert response.status_code == 201, response.text
            built[family] = folder
        return built[family]

    return base


@pytest.fixture
def adapter(family_base, tmp_path):
    def build(family: str, **lora) -> Path:
        return build_adapter(family_base(family), tmp_path / "adapter", **lora)

    return build


def upload(client: httpx.Client, name: str, folder: Path, **fields) -> httpx.Response:
    parts = [("file", (file, (folder / file).read_bytes())) for file in PEFT_FILES]
    return client.post(f"/v1/adapters/acme/{name}/versions", files=parts, data=fields)


@pytest.mark.parametrize(("family", "lora", "modules"), [
    ("llama", {"target_modules": ATTENTION}, ["k_proj", "o_proj", "q_proj", "v_proj"]),
    ("qwen2", {"target_modules": "all-linear"},
     ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]),
    # vLLM's Llama class takes embedding LoRAs (its tied lm_head stays untargeted).
    ("llama", {"target_modules": ["embed_tokens", "q_proj"]}, ["embed_tokens", "q_proj"]),
    ("qwen3", {"target_modules": ["q_proj", "v_proj"]}, ["q_proj", "v_proj"]),
    ("gemma2", {"target_modules": "all-linear"},
     ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]),
    # Fused: one LoRA over q, k and v together, one over gate and up.
    ("phi3", {"target_modules": "all-linear"}, ["down_proj", "gate_up_proj", "o_proj", "qkv_proj"]),
    ("qwen2_moe", {"target_modules": ["q_proj", "shared_expert.down_proj"]}, ["down_proj", "q_proj"]),
    ("mixtral", {"target_modules": ["q_proj", "v_proj"]}, ["q_proj", "v_proj"]),
    # Only layer 1, as layers_to_transform says.
    ("mistral", {"target_modules": ["q_proj"], "layers_to_transform": [1]}, ["q_proj"]),
    # Llama's list on Phi-3: peft targets the two names Phi-3 has, and saves the whole list.
    ("phi3", {"target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]},
     ["down_proj", "o_proj"]),
    # Latent attention's projections that vLLM runs as layers.
    ("deepseek_v2", {"target_modules": ["q_proj", "kv_a_proj_with_mqa", "o_proj"]},
     ["kv_a_proj_with_mqa", "o_proj", "q_proj"]),
    ("gemma2", {"target_modules": "all-linear", "exclude_modules": ["down_proj"]},
     ["gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]),
])
def test_real_peft_adapters_of_each_family_are_accepted(uploader, adapter, family, lora, modules):
    response = upload(uploader, f"family-{family}", adapter(family, **lora))

    assert response.status_code == 201, response.text
    assert response.json()["target_modules"] == modules


def edit_tensors(folder: Path, change) -> Path:
    tensors = load_file(folder / "adapter_model.safetensors")
    change(tensors)
    save_file(tensors, folder / "adapter_model.safetensors", metadata={"format": "pt"})
    return folder


def edit_config(folder: Path, **changes) -> Path:
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, **changes}))
    return folder


def per_expert(folder: Path, *, skip: str | None = None, wrong: str | None = None,
               owner: str = "block_sparse_moe") -> Path:
    """A Mixtral adapter with each expert's LoRA saved one by one (experts.N.w1/w2/w3), as vLLM
    takes them, under the checkpoints' name of the experts' module (`owner`; transformers 5 calls
    it `mlp`); `skip` leaves one out, `wrong` gives one a lora_B of the wrong width."""
    import numpy as np

    rng = np.random.default_rng(0)
    shapes = {"w1": (128, 256), "w3": (128, 256), "w2": (256, 128)}  # (in, out) of one expert

    def add(tensors: dict) -> None:
        for layer in (0, 1):
            for expert in range(4):
                for projection, (n_in, n_out) in shapes.items():
                    module = f"base_model.model.model.layers.{layer}.{owner}.experts.{expert}.{projection}"
                    if module.endswith(skip or "-"):
                        continue
                    width = n_out + 1 if module.endswith(wrong or "-") else n_out
                    tensors[f"{module}.lora_A.weight"] = rng.standard_normal((4, n_in), np.float32)
                    tensors[f"{module}.lora_B.weight"] = rng.standard_normal((width, 4), np.float32)

    edit_tensors(folder, add)
    return edit_config(folder, target_modules=["q_proj", "v_proj", "w1", "w2", "w3"])


def test_experts_saved_one_by_one_are_accepted_for_mixtral(uploader, adapter):
    response = upload(uploader, "family-mixtral-experts",
                      per_expert(adapter("mixtral", target_modules=["q_proj", "v_proj"])))

    assert response.status_code == 201, response.text
    assert response.json()["target_modules"] == ["down_proj", "gate_up_proj", "q_proj", "v_proj"]


Q0 = "base_model.model.model.layers.0.self_attn.q_proj"
QKV0 = "base_model.model.model.layers.0.self_attn.qkv_proj"


def test_an_adapter_with_the_checkpoints_names_is_judged_by_the_rules_peft_matched_them_with(uploader, adapter):
    """Trained where Mixtral's router is block_sparse_moe.gate (transformers 5's mlp.gate), with
    the router excluded under that name: the router needs no tensors."""
    folder = edit_config(per_expert(adapter("mixtral", target_modules=["q_proj", "v_proj"])),
                         target_modules=["q_proj", "v_proj", "w1", "w2", "w3", "gate"],
                         exclude_modules=["block_sparse_moe.gate"])

    response = upload(uploader, "family-mixtral-checkpoint-names", folder)

    assert response.status_code == 201, response.text


@pytest.mark.parametrize(("family", "lora", "change", "code", "message"), [
    # vLLM's Qwen2 class takes no embedding LoRA: it would refuse the whole adapter at load.
    ("qwen2", {"target_modules": ["embed_tokens", "q_proj"]}, None, "module_not_served",
     "tensor 'base_model.model.model.embed_tokens.lora_embedding_A': vLLM 0.32.0 serves no LoRA on "
     "embed_tokens for Qwen2ForCausalLM"),
    # peft turns all-linear on Mixtral into 3-D expert LoRAs, with a doubled rank for gate_up
    # under a regex key (read as peft reads it); vLLM's Mixtral takes experts one at a time.
    ("mixtral", {"target_modules": "all-linear"}, None, "module_not_served",
     "vLLM 0.32.0 takes expert LoRAs for MixtralForCausalLM one expert at a time"),
    # Experts only: peft saves an empty target_modules beside target_parameters.
    ("mixtral", {"target_modules": [], "target_parameters": ["mlp.experts.gate_up_proj"]}, None,
     "module_not_served", "vLLM 0.32.0 takes expert LoRAs for MixtralForCausalLM one expert at a time"),
    # peft's 3-D expert LoRA: vLLM's Mixtral takes expert LoRAs one expert at a time.
    ("mixtral", {"target_modules": ["q_proj"], "target_parameters": ["mlp.experts.down_proj"]}, None,
     "module_not_served", "vLLM 0.32.0 takes expert LoRAs for MixtralForCausalLM one expert at a time"),
    ("phi3", {"target_modules": ["qkv_proj"]},
     lambda folder: edit_tensors(folder, lambda t: t.update(
         {f"{QKV0}.lora_B.weight": t[f"{QKV0}.lora_B.weight"][:64]})),
     "shape_mismatch", "module 'model.layers.0.self_attn.qkv_proj' (linear): expected lora_A (4, 128) "
                       "and lora_B (256, 4), got (4, 128) and (64, 4)"),
    ("mixtral", {"target_modules": ["q_proj", "v_proj"]}, lambda folder: per_expert(folder, wrong="3.w2"),
     "shape_mismatch", "module 'model.layers.0.block_sparse_moe.experts.3.w2' (expert_parameter): expected "
                       "lora_A (4, 256) and lora_B (128, 4), got (4, 256) and (129, 4)"),
    ("mixtral", {"target_modules": ["q_proj", "v_proj"]}, lambda folder: per_expert(folder, skip="2.w3"),
     "incomplete_experts", "'model.layers.0.block_sparse_moe.experts' has LoRAs for some experts but none for "
                           "expert 2's up_proj (1 missing)"),
    # Expert 0's w1 saved a second time under its other name: vLLM would stack one of the two.
    ("mixtral", {"target_modules": ["q_proj", "v_proj"]}, lambda folder: edit_config(edit_tensors(
        per_expert(folder), lambda t: t.update({name.replace(".0.w1.", ".0.gate_proj."): value
                                                for name, value in list(t.items()) if ".experts.0.w1." in name})),
        target_modules=["q_proj", "v_proj", "w1", "w2", "w3", "gate_proj"]),
     "duplicate_module", "'model.layers.0.block_sparse_moe.experts.0.gate_proj' and "
                         "'model.layers.0.block_sparse_moe.experts.0.w1' are "
                         "both expert 0's gate_proj; vLLM would serve one of them"),
    # Trained on layer 1 only, but the config now says layers 0 and 1.
    ("llama", {"target_modules": ["q_proj"], "layers_to_transform": [1]},
     lambda folder: edit_config(folder, layers_to_transform=[0, 1]), "target_without_tensors",
     "adapter_config.json targets 'model.layers.0.self_attn.q_proj', but no tensor is saved for it"),
    ("llama", {"target_modules": ["q_proj"], "layers_to_transform": [1]},
     lambda folder: edit_config(folder, layers_to_transform=[0]), "untargeted_module",
     "'base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight' is for a module that "
     "target_modules does not target"),
    # A module the family does not have: vLLM would load it and never apply it.
    ("phi3", {"target_modules": ["qkv_proj"]},
     lambda folder: edit_tensors(folder, lambda t: t.update(
         {name.replace("qkv_proj", "q_proj"): value for name, value in list(t.items())})),
     "unknown_module", "is for module 'model.layers.0.self_attn.q_proj', which Phi3ForCausalLM does not have"),
    # Experts saved one by one under transformers 5's name of their module (mlp); vLLM's Mixtral
    # keeps the checkpoints' (block_sparse_moe) and would never apply them.
    ("mixtral", {"target_modules": ["q_proj", "v_proj"]}, lambda folder: per_expert(folder, owner="mlp"),
     "module_not_served", "MixtralForCausalLM's checkpoints, and vLLM 0.32.0, name this module "
                          "'model.layers.0.block_sparse_moe.experts.0.w1'; under transformers"),
    # Latent attention folds kv_b_proj's weight into the attention: vLLM would load its LoRA
    # and serve the base's answer (measured: log-probabilities 0.68 off peft's).
    ("deepseek_v2", {"target_modules": ["q_proj", "kv_b_proj"]}, None, "module_not_served",
     "vLLM 0.32.0 folds kv_b_proj's weight into DeepseekV2ForCausalLM's latent attention"),
], ids=["embedding_not_served", "mixtral_all_linear", "experts_only_not_served", "experts_3d_not_served", "fused_wrong_shape", "expert_wrong_shape",
        "expert_missing", "expert_named_twice", "layers_to_transform_missing_layer", "layers_to_transform_extra_layer",
        "module_the_family_lacks", "experts_under_transformers_5_names", "latent_attention_absorbs_kv_b_proj"])
def test_what_vllm_would_not_serve_is_refused_naming_the_module(uploader, adapter, stored_state,
                                                               family, lora, change, code, message):
    folder = adapter(family, **lora)
    if change is not None:
        change(folder)
    before = stored_state()

    assert_refused(upload(uploader, f"refused-{family}", folder), 422, code, message)
    assert stored_state() == before


def test_experts_of_one_projection_at_two_ranks_are_served_only_folded(uploader, adapter, stored_state):
    """vLLM stacks expert 0's w1 with every other expert's into one LoRA of one rank: a
    rank_pattern giving it rank 8 beside the others' 4 is refused as uploaded (vLLM would refuse
    to load it), and accepted with fold_scaling, which pads every expert to rank 8."""
    import numpy as np

    rng = np.random.default_rng(1)
    folder = edit_tensors(per_expert(adapter("mixtral", target_modules=["q_proj", "v_proj"])), lambda t: t.update({
        name: rng.standard_normal((8, value.shape[1]) if ".lora_A." in name else (value.shape[0], 8), np.float32)
        for name, value in list(t.items()) if ".experts.0.w1." in name}))
    edit_config(folder, rank_pattern={r"experts\.0\.w1": 8})
    before = stored_state()

    assert_refused(upload(uploader, "mixtral-expert-ranks", folder), 422, "expert_ranks_differ",
                   "'model.layers.0.block_sparse_moe.experts.0.w1' has rank 8 but "
                   "'model.layers.0.block_sparse_moe.experts.1.w1' has rank 4; vLLM stacks every expert's gate_proj into one LoRA of one rank")
    assert stored_state() == before
    folded = upload(uploader, "mixtral-expert-ranks", folder, fold_scaling="true")
    assert folded.status_code == 201, folded.text
    assert folded.json()["rank"] == 8 and folded.json()["derived_from"] is not None
