"""The in-place parity reference gives what merging each adapter into a copy of the base gave,
bit for bit, adapter after adapter through one base, and leaves the base exactly as loaded."""

from __future__ import annotations

import pytest

from devkit.parity_oracle import CopyingReference
from devkit.tiny_model import build_adapter
from workers.evaluation.parity import Reference


ADAPTERS = [dict(r=8, target_modules=("q_proj", "v_proj"), seed=3),
            dict(r=4, target_modules=("q_proj", "k_proj", "v_proj", "o_proj"), seed=4),
            dict(r=16, target_modules=("gate_proj", "up_proj", "down_proj"), seed=5),
            dict(r=8, target_modules=("q_proj", "v_proj"), seed=3)]  # the first again, after others


def items(vocab: int) -> list[tuple[list[int], list[int], list[float]]]:
    # The engine's tokens and log-probabilities are made up: both references score the same ones.
    return [([(5 + 7 * i + j) % vocab for j in range(6)], [(11 * i + j) % vocab for j in range(5)],
             [-1.0 - 0.1 * j for j in range(5)]) for i in range(4)]


@pytest.fixture(scope="module")
def adapters(tiny_base, tmp_path_factory):
    root = tmp_path_factory.mktemp("parity-adapters")
    return [build_adapter(tiny_base, root / f"a{i}", lora_alpha=16, **spec) for i, spec in enumerate(ADAPTERS)]


@pytest.mark.parametrize("merge", [True, False])
def test_in_place_equals_a_copy_per_adapter_and_the_base_is_left_as_loaded(tiny_base, adapters, merge):
    import json

    import torch

    vocab = json.loads((tiny_base / "config.json").read_text())["vocab_size"]
    in_place, oracle = Reference(tiny_base, device="cpu"), CopyingReference(tiny_base)
    before = {name: tensor.clone() for name, tensor in in_place.base.state_dict().items()}

    for adapter in adapters:
        assert in_place.compare(adapter, items(vocab), merge=merge) == oracle.compare(adapter, items(vocab), merge=merge)

    after = in_place.base.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[name], tensor) for name, tensor in before.items())
    assert not any("lora" in name for name in after)


def test_a_worker_keeps_one_reference_and_loads_it_again_after_a_comparison_failed(tiny_base, tmp_path):
    from workers.evaluation.parity import kept_reference

    kept = kept_reference(tiny_base, dtype="float32", device="cpu", threads=None, keep=True)
    assert kept_reference(tiny_base, dtype="float32", device="cpu", threads=None, keep=True) is kept

    with pytest.raises(Exception):  # no adapter there: peft refuses it, part way or not
        kept.compare(tmp_path / "no-adapter", [])

    fresh = kept_reference(tiny_base, dtype="float32", device="cpu", threads=None, keep=True)
    assert fresh is not kept and not fresh.damaged
    assert kept_reference(tiny_base, dtype="float32", device="cpu", threads=None, keep=False) is not fresh
