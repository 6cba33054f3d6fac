"""Does the registry's verdict on a family's adapter agree with what vLLM does with it?

For one base and one peft adapter:

- the registry's verdict is the upload check itself: the module table derived from the base's
  config, then adapter_config.json and every tensor checked against it;
- vLLM's verdict comes from a real engine serving the base. It either refuses to load the
  adapter, or serves it. Served tokens are then compared with peft's own forward pass
  (workers/evaluation/parity.py, unmerged), teacher-forced. Served means equal
  greedy tokens within the parity tolerance; wrong means other tokens. An adapter whose tokens
  equal the base's own proves nothing either way (vLLM may have ignored it): no_effect, a probe
  to make stronger, never counted as agreement. An engine that dies on the request (vLLM's
  MoE LoRA kernels, for one, do not run on CPU) has crashed: the family does not run here.

They agree when the registry accepts what vLLM serves, and refuses what vLLM refuses, serves
wrong or ignores.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from registry.adapters import lora_layout, peft_config, safetensors_check, scaling_fold
from registry.adapters.validation import header_limit
from registry.base_models import config_checks, vllm_support
from registry.base_models.derivation import derive
from registry.base_models.module_table import ModuleTable
from registry.errors import LoraplaneError
from workers.evaluation.parity import Reference

TOLERANCE = 1e-3  # an eval suite's default parity tolerance (max log-probability gap)
MAX_TOKENS = 8
PROMPTS = 3


@dataclass(frozen=True)
class Outcome:
    family: str
    recipe: str
    registry: str  # "accepted", or the refusal's code
    registry_message: str
    vllm: str  # "served", "refused", "wrong", "no_effect" or "crashed"
    vllm_message: str

    @property
    def agree(self) -> bool:
        if self.vllm in ("no_effect", "crashed"):
            return False
        return (self.registry == "accepted") == (self.vllm == "served")

    def to_json(self) -> dict:
        return {**asdict(self), "agree": self.agree}


def recipes(table: ModuleTable) -> dict[str, dict]:
    """The adapters each family is tried with: its attention projections (whatever the family
    calls them: q_proj or a fused qkv_proj), every linear layer, its input embedding with one
    projection (an embedding LoRA, which vLLM takes for some families only), and the attention
    projections with a rank_pattern and an alpha_pattern (two modules with their own scaling)."""
    facts = vllm_support.facts_for(table.architecture)
    absorbed = facts.absorbed_modules if facts else frozenset()  # all-linear still tries them
    attention = sorted({entry.short_name for entry in table.modules
                        if entry.kind == "linear" and ".self_attn." in entry.name} - absorbed)
    embedding = next(entry.short_name for entry in table.modules if entry.kind == "embedding")
    return {"attention": {"target_modules": attention}, "all-linear": {"target_modules": "all-linear"},
            "embedding": {"target_modules": [embedding, attention[0]]},
            "patterns": {"target_modules": attention, "rank_pattern": {attention[-1]: 8},
                         "alpha_pattern": {attention[0]: 32}}}


def adapters(base: Path, table: ModuleTable, work: Path) -> dict[str, tuple[Path, Path]]:
    """Each recipe's adapter, built by peft, as recipe -> (what vLLM is given, what peft's
    reference is computed from). `patterns-folded` gives vLLM the registry's fold of the
    patterns adapter (an upload with fold_scaling), and keeps the upload as the reference."""
    from devkit.family_models import build_adapter

    built = {}
    for seed, (recipe, lora) in enumerate(recipes(table).items()):
        path = build_adapter(base, work / recipe, seed=seed, **lora)
        built[recipe] = (path, path)
    patterns = built["patterns"][0]
    built["patterns-folded"] = (folded(table, patterns, work / "patterns-folded"), patterns)
    return built


def folded(table: ModuleTable, adapter_dir: Path, out: Path) -> Path:
    """The adapter an upload of `adapter_dir` with fold_scaling serves, saved in `out`."""
    spec = peft_config.parse_config((adapter_dir / "adapter_config.json").read_bytes())
    weights = adapter_dir / "adapter_model.safetensors"
    with weights.open("rb") as file:
        tensors = safetensors_check.read_tensors(file, weights.stat().st_size, header_limit(table, 64 * 2**20))
    out.mkdir(parents=True, exist_ok=True)
    result = scaling_fold.fold(spec, lora_layout.check_layout(tensors, spec, table), weights, out, 2**31)
    (out / "adapter_config.json").write_bytes(result.config)
    result.weights.replace(out / "adapter_model.safetensors")
    return out


def table_of(base_dir: Path) -> ModuleTable:
    config = json.loads((base_dir / "config.json").read_text())
    config_checks.check(config)
    return derive(config)


def registry_verdict(table: ModuleTable, adapter_dir: Path) -> tuple[str, str]:
    """What an upload of this adapter would answer: accepted, or the refusal's code and message."""
    try:
        spec = peft_config.parse_config((adapter_dir / "adapter_config.json").read_bytes())
        weights = adapter_dir / "adapter_model.safetensors"
        with weights.open("rb") as file:
            tensors = safetensors_check.read_tensors(file, weights.stat().st_size,
                                                     header_limit(table, 64 * 2**20))
        lora_layout.refuse_uneven_expert_ranks(lora_layout.check_layout(tensors, spec, table))
    except LoraplaneError as refused:
        return refused.code, refused.message
    return "accepted", ""


class Engine:
    """A vLLM server of one base, spoken to as the eval worker speaks to it; `log` is its output,
    read for the cause when it dies."""

    def __init__(self, url: str, base_name: str, base_dir: Path, log: Path | None = None) -> None:
        self.url, self.base_name, self.log = url, base_name, log
        self.http = httpx.Client(base_url=url, timeout=120)
        self.reference = Reference(base_dir)
        vocab = json.loads((base_dir / "config.json").read_text())["vocab_size"]
        # Fixed prompts of ordinary token ids (above the special ones), the same for every adapter.
        self.prompts = [[(7 + 31 * i + 17 * j) % (vocab - 8) + 4 for j in range(6)] for i in range(PROMPTS)]

    def verdict(self, name: str, adapter_dir: Path, reference: Path | None = None) -> tuple[str, str]:
        """Load `adapter_dir` and compare what vLLM serves with peft's forward pass of
        `reference` (by default the same adapter)."""
        try:
            loaded = self.http.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(adapter_dir)})
            if loaded.status_code != 200:
                return "refused", _message(loaded)
            served = [self._generate(name, prompt) for prompt in self.prompts]
            self.http.post("/v1/unload_lora_adapter", json={"lora_name": name})
        except (RuntimeError, httpx.HTTPError) as failed:  # a refusal at the first request, or a crash
            if not self.alive():
                return "crashed", self.cause_of_death()
            return "refused", f"{type(failed).__name__}: {failed}"[:500]
        parity = self.reference.compare(reference or adapter_dir,
                                        [(p, ids, lps) for p, (ids, lps) in zip(self.prompts, served, strict=True)],
                                        merge=False)  # peft's own forward: what the adapter means
        worst = max(check.max_logprob_diff for check in parity)
        if not all(check.tokens_match for check in parity) or worst > TOLERANCE:
            return "wrong", f"tokens differ from peft's, or their log-probabilities by {worst:.2g}"
        if [ids for ids, _ in served] == [self._generate(self.base_name, p)[0] for p in self.prompts]:
            return "no_effect", "the base's own tokens: the adapter changed nothing to compare"
        return "served", f"peft's tokens, log-probabilities within {worst:.2g}"

    def alive(self) -> bool:
        try:
            return self.http.get("/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def cause_of_death(self) -> str:
        """The last error vLLM logged before its engine died, without its log prefix."""
        lines = self.log.read_text(errors="replace").splitlines() if self.log and self.log.exists() else []
        errors = [line.split("] ", 1)[-1].strip() for line in lines
                  if re.search(r"\w+(Error|Exception): ", line) and "EngineDead" not in line
                  and "EngineCore encountered" not in line]
        return (errors[-1] if errors else "the engine died")[:300]

    def _generate(self, model: str, prompt: list[int]) -> tuple[list[int], list[float]]:
        response = self.http.post("/v1/completions", json={
            "model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "logprobs": 0,
            "return_tokens_as_token_ids": True, "ignore_eos": True})
        if response.status_code != 200:
            raise RuntimeError(_message(response))
        logprobs = response.json()["choices"][0]["logprobs"]
        return [int(t.removeprefix("token_id:")) for t in logprobs["tokens"]], logprobs["token_logprobs"]

    def close(self) -> None:
        self.http.close()


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
        return str(body.get("error", {}).get("message") or body.get("message") or body)[:500]
    except ValueError:
        return response.text[:500]


def vllm_version() -> str:
    """The vLLM the facts were read from (registry/base_models/vllm_lora_facts.json)."""
    return vllm_support.version()
