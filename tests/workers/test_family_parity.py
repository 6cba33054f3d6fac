"""For each family x adapter recipe, the registry's verdict agrees with what a real vLLM does: it
accepts what vLLM serves with peft's greedy tokens, and refuses what vLLM refuses, serves wrong
or ignores. Each family needs an engine of its own (about a minute here), so the suite runs two:
one with fused projections (Phi-3) and one without (Qwen2, with attention biases);
`python -m bench.families` runs every family."""

from __future__ import annotations

import pytest

from devkit import engine, family_parity
from devkit.family_models import build_base
from devkit.services import free_port, start_vllm, stop_group
from tests.support import cpu_lock

FAMILIES = ("phi3", "qwen2")
pytestmark = pytest.mark.own_engine  # first in its lane: tests/support/lanes.py


@pytest.fixture(scope="module", params=FAMILIES)
def family_engine(request, tiny_base, tmp_path_factory):
    family = request.param
    folder = tmp_path_factory.mktemp(family)
    base = build_base(family, folder / "base", tokenizer=tiny_base)
    spec = engine.EngineSpec(model_dir=base, served_name=f"family-{family}", port=free_port(),
                             max_loras=1, max_cpu_loras=2, max_lora_rank=8)
    with cpu_lock.engine_running(tmp_path_factory):
        service = start_vllm(folder / "vllm", spec)
        served = family_parity.Engine(service.url, spec.served_name, base)
        yield family, base, served
        served.close()
        stop_group(service)


def test_the_registry_agrees_with_vllm_on_every_recipe(family_engine, tmp_path):
    family, base, served = family_engine
    table = family_parity.table_of(base)
    outcomes = [family_parity.Outcome(family, recipe, *family_parity.registry_verdict(table, adapter),
                                      *served.verdict(f"{family}-{recipe}", adapter, reference=reference))
                for recipe, (adapter, reference) in family_parity.adapters(base, table, tmp_path).items()]

    assert [outcome.to_json() for outcome in outcomes if not outcome.agree] == []
    # Both families serve attention and all-linear adapters, and the rank_pattern adapter both as
    # uploaded and folded (the folded one compared with peft's forward pass of the upload): the
    # verdicts are not all refusals.
    assert {o.recipe: o.vllm for o in outcomes if o.recipe != "embedding"} == {
        "attention": "served", "all-linear": "served", "patterns": "served", "patterns-folded": "served"}
