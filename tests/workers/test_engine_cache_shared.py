"""A real engine reads and writes vLLM's model-class cache through the shared folder
(devkit.engine.share_modelinfo_cache), so later starts skip inspecting the class."""

from __future__ import annotations

from devkit import engine


def test_the_eval_engine_keeps_what_it_learned_of_its_model_class_in_the_shared_cache(eval_engine, service_dir):
    own = service_dir / "vllm" / "cache" / "modelinfos"
    assert own.is_symlink() and own.resolve() == engine.shared_modelinfo_dir().resolve()
    assert [path.name for path in own.glob("*-LlamaForCausalLM.json")] == [
        "vllm-model_executor-models-llama-LlamaForCausalLM.json"]
