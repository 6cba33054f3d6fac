"""The example alert rules load, their unit tests pass under promtool, and every metric they or
the catalogue in docs/operations.md name is one the code exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus"
PRODUCT = ("registry", "workers", "serving")
DEFINED = re.compile(r'(?:Counter|Gauge|Histogram|GaugeMetricFamily)\(\s*"(loraplane_[a-z_]+)"')
NAMED = re.compile(r"\b(loraplane_[a-z_]+)\b")
SUFFIXES = ("_bucket", "_count", "_sum")


def exported() -> set[str]:
    names = set()
    for package in PRODUCT:
        for source in (ROOT / package).rglob("*.py"):
            names.update(DEFINED.findall(source.read_text()))
    return names


def base_name(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in exported():
            return name.removesuffix(suffix)
    return name


def catalogue() -> set[str]:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(loraplane_[a-z_]+)`", section, flags=re.M))


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: ./dev test installs it (Debian's prometheus package)"
    return found


def test_the_rules_load(promtool):
    checked = subprocess.run([promtool, "check", "rules", "loraplane-alerts.yaml"], cwd=RULES,
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def test_the_rules_unit_tests_pass(promtool):
    tested = subprocess.run([promtool, "test", "rules", "loraplane-alerts.test.yaml"], cwd=RULES,
                            capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_rules_name_only_exported_metrics():
    groups = yaml.safe_load((RULES / "loraplane-alerts.yaml").read_text())["groups"]
    expressions = " ".join(rule["expr"] for group in groups for rule in group["rules"])
    named = {base_name(name) for name in NAMED.findall(expressions)}
    assert named, "no metric found in the rules"
    assert named <= exported(), f"not exported by the code: {sorted(named - exported())}"


def test_the_catalogue_lists_every_exported_metric_and_no_other():
    documented = catalogue()
    assert documented == exported(), (f"undocumented: {sorted(exported() - documented)}; "
                                      f"documented but not exported: {sorted(documented - exported())}")
