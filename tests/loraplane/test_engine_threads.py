"""The model's threads in a devkit engine: every core but one, as vLLM itself splits them when the
model runs in a process of its own. The cores a machine has cannot be varied here, so the
process's CPU affinity is replaced for these tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devkit import engine

SPEC = engine.EngineSpec(model_dir=Path("/models/base"), served_name="base", port=8000)


@pytest.mark.parametrize(("cores", "threads"), [(1, "1"), (2, "1"), (16, "15")])
def test_the_model_gets_every_core_but_one(cores, threads, tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    env = engine.environment(SPEC, tmp_path / "cache")
    assert env["OMP_NUM_THREADS"] == threads
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # the in-process model these threads are for


def test_an_omp_num_threads_already_set_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "6")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert engine.environment(SPEC, tmp_path / "cache")["OMP_NUM_THREADS"] == "6"
