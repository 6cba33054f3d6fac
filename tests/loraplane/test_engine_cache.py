"""Every engine shares vLLM's model-class cache, so only the first start on a machine inspects
the model's class in a subprocess; the rest of each engine's cache stays its own."""

from __future__ import annotations

from pathlib import Path

from devkit import engine

SPEC = engine.EngineSpec(model_dir=Path("/models/base"), served_name="base", port=8000)


def test_two_engines_share_the_model_class_cache_and_keep_the_rest_private(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "shared"))
    first = engine.environment(SPEC, tmp_path / "a" / "cache")
    second = engine.environment(SPEC, tmp_path / "b" / "cache")

    assert (first["VLLM_CACHE_ROOT"], second["VLLM_CACHE_ROOT"]) == (
        str(tmp_path / "a" / "cache"), str(tmp_path / "b" / "cache"))
    shared = tmp_path / "shared" / "modelinfos"
    assert (tmp_path / "a" / "cache" / "modelinfos").resolve() == shared
    assert (tmp_path / "b" / "cache" / "modelinfos").resolve() == shared
    (shared / "llama.json").write_text("{}")  # what one engine learns, the other reads
    assert (tmp_path / "b" / "cache" / "modelinfos" / "llama.json").read_text() == "{}"


def test_without_vllms_own_setting_the_cache_is_under_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert engine.shared_modelinfo_dir() == tmp_path / "xdg" / "vllm" / "modelinfos"


def test_an_unwritable_shared_cache_leaves_the_engine_a_private_one(tmp_path, monkeypatch):
    (tmp_path / "shared").write_text("a file where the cache folder belongs")
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "shared"))
    env = engine.environment(SPEC, tmp_path / "a" / "cache")

    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "a" / "cache")
    assert not (tmp_path / "a" / "cache" / "modelinfos").exists()
    assert (tmp_path / "shared").read_text() == "a file where the cache folder belongs"


def test_a_second_call_keeps_the_link_and_a_private_folder_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "shared"))
    engine.environment(SPEC, tmp_path / "a" / "cache")
    engine.environment(SPEC, tmp_path / "a" / "cache")  # a restart of the same engine
    assert (tmp_path / "a" / "cache" / "modelinfos").is_symlink()

    private = tmp_path / "b" / "cache" / "modelinfos"
    private.mkdir(parents=True)  # an engine's own cache from before sharing
    (private / "kept.json").write_text("{}")
    engine.environment(SPEC, tmp_path / "b" / "cache")
    assert not private.is_symlink() and (private / "kept.json").read_text() == "{}"
