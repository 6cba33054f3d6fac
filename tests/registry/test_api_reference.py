"""docs/api.md is what the registry's OpenAPI document says today."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_api_reference_matches_the_code(tmp_path):
    # A clean environment: no LORAPLANE_* setting of this machine may change the document.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LORAPLANE_DATA_DIR": str(tmp_path)}
    generated = subprocess.run([sys.executable, "-m", "registry.api_reference"], cwd=REPO, env=env,
                               capture_output=True, text=True, timeout=120, check=True).stdout
    assert "### `POST /v1/promotions/{promotion_id}/approve`" in generated
    assert generated == (REPO / "docs" / "api.md").read_text(), (
        "docs/api.md is stale: run `python -m registry.api_reference > docs/api.md`")
