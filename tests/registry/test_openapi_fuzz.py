"""Schemathesis generates requests from the OpenAPI schema; no input may cause a 5xx."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"


def test_no_generated_request_causes_a_server_error(registry, tokens, base_model, tmp_path):
    result = subprocess.run(
        [str(SCHEMATHESIS), "run", f"{registry.url}/openapi.json",
         "--checks", "not_a_server_error",
         "--header", f"Authorization: Bearer {tokens['global_admin']}",
         "--max-examples", "25", "--seed", "7", "--request-timeout", "30",
         "--phases", "examples,coverage,fuzzing", "--continue-on-failure",
         # Random ids would revoke the session's tokens, every other test's included; its only
         # inputs (an id and a flag) are exercised by the authorization matrix and token tests.
         "--exclude-path", "/v1/tokens/{token_id}/revoke",
         # Likewise a rotation with a random overlap (0 s included) would end the trust in the
         # key every node of the session pinned; rotation has tests of its own.
         "--exclude-path", "/v1/attestation-keys/rotate"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    generated = re.search(r"(\d+) generated", result.stdout)
    assert generated and int(generated.group(1)) > 300, result.stdout[-3000:]
    assert "Server error" not in result.stdout
