"""A tiny Llama base model and real PEFT LoRA adapters for it, built offline.

Tests and local runs need a model that real tools (transformers, PEFT, vLLM on
CPU) load as if it were a real checkpoint, yet that builds in seconds with no
hub access. Everything here is deterministic for a given seed, so two builds
give byte-identical weights and tests can compare outputs across runs.

torch, transformers, peft and tokenizers are imported inside the functions:
the server install lacks them and must still be able to import this module.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["TinyLlamaSpec", "build_base_model", "build_adapter"]

# Written last into a finished base model; records what was built, so a
# repeated call with other arguments fails loudly instead of reusing it.
_MARKER = "loraplane_tiny.json"
_BASE_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
_SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")  # ids 0..3, in this order


@dataclass(frozen=True)
class TinyLlamaSpec:
    """Model dimensions. head_dim (hidden_size / num_attention_heads) must stay
    at 32 or more, because vLLM's CPU attention backend refuses 16."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    vocab_size: int = 1000
    max_position_embeddings: int = 512

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.vocab_size <= 256 + len(_SPECIAL_TOKENS):
            raise ValueError("vocab_size must exceed the 256 byte tokens plus the special tokens")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def build_base_model(
    out_dir: Path, *, seed: int = 0, spec: TinyLlamaSpec = TinyLlamaSpec()
) -> Path:
    """Build the base model in out_dir, or return it at once if already built.

    Reuse makes the call cheap enough for every test fixture; the build goes to
    a temp dir beside out_dir and is renamed in, so out_dir is either absent or
    complete, even after a crash or with concurrent builders.
    """
    out_dir = Path(out_dir)
    wanted = {"seed": seed, "spec": asdict(spec)}
    if _is_complete_base(out_dir):
        _check_marker(out_dir, wanted)
        return out_dir
    tmp = _make_temp_dir(out_dir)
    try:
        tokenizer = _train_tokenizer(spec, seed)
        tokenizer.save_pretrained(tmp)
        _name_tokenizer_class_portably(tmp)
        _save_random_model(tmp, spec, seed, tokenizer)
        (tmp / _MARKER).write_text(json.dumps(wanted, indent=2, sort_keys=True) + "\n")
        _make_files_readable(tmp)
        try:
            os.replace(tmp, out_dir)  # succeeds only onto a missing or empty dir
        except OSError:
            if not _is_complete_base(out_dir):  # not a concurrent builder's result
                raise FileExistsError(f"{out_dir} exists and is not a tiny base model") from None
            _check_marker(out_dir, wanted)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def build_adapter(
    base_dir: Path,
    out_dir: Path,
    *,
    r: int = 8,
    lora_alpha: int = 16,
    target_modules: Sequence[str] = ("q_proj", "v_proj"),
    seed: int = 1,
    base_model_name: str | None = None,
) -> Path:
    """Save a PEFT LoRA adapter for the base model in base_dir to out_dir.

    init_lora_weights=False gives random nonzero A and B (PEFT's default B=0
    would make every adapter a no-op), so adapters with different seeds change
    the model's outputs differently. base_model_name lets the adapter name the
    base as a server knows it rather than by a local path. An existing out_dir
    is replaced (output depends only on the arguments), never half-written: it
    is briefly absent between two renames, but never partial.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base_dir, out_dir = Path(base_dir), Path(out_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, device_map="cpu")
    config = LoraConfig(
        r=r,
        lora_alpha=lora_alpha,
        target_modules=list(target_modules),
        init_lora_weights=False,
        task_type="CAUSAL_LM",
    )
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, config)
    _save_atomically(peft_model, out_dir, base_model_name or str(base_dir))
    return out_dir


def build_adapters(base_dir: Path, out_root: Path, seeds: Sequence[int], *, r: int = 8, lora_alpha: int = 16,
                   target_modules: Sequence[str] = ("q_proj", "v_proj"),
                   base_model_name: str | None = None) -> list[Path]:
    """Many adapters as build_adapter makes them (random nonzero A and B, drawn as nn.Linear draws
    them), one per seed, into out_root/adapter-<seed>: the base is loaded once, and each
    adapter's LoRA weights are drawn afresh from its seed."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(Path(base_dir), dtype=torch.float32, device_map="cpu")
    peft_model = get_peft_model(model, LoraConfig(r=r, lora_alpha=lora_alpha, target_modules=list(target_modules),
                                                  init_lora_weights=False, task_type="CAUSAL_LM"))
    lora_layers = [module for name, module in peft_model.named_modules()
                   if isinstance(module, torch.nn.Linear) and (".lora_A." in name or ".lora_B." in name)]
    folders = []
    for seed in seeds:
        torch.manual_seed(seed)
        for layer in lora_layers:
            layer.reset_parameters()
        folder = Path(out_root) / f"adapter-{seed}"
        _save_atomically(peft_model, folder, base_model_name or str(base_dir))
        folders.append(folder)
    return folders


def _save_atomically(peft_model, out_dir: Path, base_model_name: str) -> None:
    tmp = _make_temp_dir(out_dir)
    old = tmp.with_name(tmp.name + "-old")
    try:
        peft_model.save_pretrained(str(tmp), safe_serialization=True)
        _finish_adapter_config(tmp, base_model_name)
        _make_files_readable(tmp)
        if out_dir.exists():
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def _make_temp_dir(out_dir: Path) -> Path:
    """A build dir beside out_dir (same filesystem, so the final rename is atomic),
    readable by others: mkdtemp's 0700 would hide it from a server running as
    another user."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    tmp.chmod(0o755)
    return tmp


def _make_files_readable(build_dir: Path) -> None:
    """safetensors writes 0600 files and mkdtemp 0700 dirs; a server running as
    another user must read them."""
    for path in build_dir.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _finish_adapter_config(adapter_dir: Path, base_model_name: str) -> None:
    """Name the base as a server knows it, and write target_modules in a stable
    order (PEFT writes a set's order, which varies between runs)."""
    config_path = adapter_dir / "adapter_config.json"
    saved = json.loads(config_path.read_text())
    saved["base_model_name_or_path"] = base_model_name
    if isinstance(saved.get("target_modules"), list):
        saved["target_modules"] = sorted(saved["target_modules"])
    config_path.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")


def _is_complete_base(path: Path) -> bool:
    return all((path / name).is_file() for name in (*_BASE_FILES, _MARKER))


def _check_marker(path: Path, wanted: dict) -> None:
    found = json.loads((path / _MARKER).read_text())
    if found != wanted:
        raise FileExistsError(f"{path} holds a tiny model built with {found}, not {wanted}")


def _train_tokenizer(spec: TinyLlamaSpec, seed: int, corpus: Sequence[str] | None = None):
    """Byte-level BPE, so any text encodes (no unknown tokens) like a real Llama
    tokenizer; trained on a synthetic corpus because nothing may be downloaded.
    A caller may pass its own corpus to make its frequent words single tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=list(_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_synthetic_corpus(seed) if corpus is None else corpus, trainer=trainer)
    # Prepend <s> as Llama tokenizers do, so prompts look the same to vLLM.
    bos_id = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=spec.max_position_embeddings,
    )


_COMMON_WORDS = (  # noqa: SIM905 (a hundred words read better as prose than as a list)
    "the of and to in is it that for on with as was he she they we you this be at by "
    "not are from or have an had but what all were when there can said which do their "
    "if will up other about out many then them these so some her would make like him "
    "into time has look two more write go see number no way could people my than first "
    "water been call who oil its now find long down day did get come made may part model "
    "adapter serve request token answer question hello world yes okay please thanks"
).split()


def _name_tokenizer_class_portably(model_dir: Path) -> None:
    """transformers 5 records "TokenizersBackend", a name transformers 4 (which a
    vLLM install may pin) cannot load; "PreTrainedTokenizerFast" loads in both."""
    path = model_dir / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _synthetic_corpus(seed: int, sentences: int = 4000) -> list[str]:
    """English-ish sentences: common words, pronounceable made-up words, numbers
    and punctuation, enough distinct pairs to fill about a thousand merges."""
    rng = random.Random(seed)
    onsets = ["", "b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "v", "w",
              "br", "ch", "cl", "st", "th", "tr", "sh", "pl", "gr"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "oo", "y"]
    codas = ["", "", "n", "r", "s", "t", "l", "m", "ng", "ck", "st", "nd"]
    invented = [
        "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                for _ in range(rng.randint(1, 3)))
        for _ in range(600)
    ]
    lines = []
    for _ in range(sentences):
        words = []
        for _ in range(rng.randint(4, 14)):
            roll = rng.random()
            if roll < 0.55:
                words.append(rng.choice(_COMMON_WORDS))
            elif roll < 0.93:
                words.append(rng.choice(invented))
            else:
                words.append(str(rng.randint(0, 9999)))
        words[0] = words[0].capitalize()
        lines.append(" ".join(words) + rng.choice([".", ".", "?", "!", ","]))
    return lines


def _save_random_model(out_dir: Path, spec: TinyLlamaSpec, seed: int, tokenizer) -> None:
    import torch
    from transformers import LlamaForCausalLM

    config = _llama_config(spec, tokenizer)
    torch.manual_seed(seed)
    # transformers' wrapped .to() is typed as if unbound: mypy wants the model as its argument.
    model = LlamaForCausalLM(config).to(torch.float32)  # type: ignore[arg-type]
    model.save_pretrained(out_dir, safe_serialization=True)


def _llama_config(spec: TinyLlamaSpec, tokenizer):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
