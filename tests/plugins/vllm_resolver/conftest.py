"""The plugin is installed into vLLM's environment, not the project's: its plain-Python half
(asking.py, no vLLM import) is imported here from the checkout."""

from __future__ import annotations

import sys
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[3] / "plugins" / "vllm-resolver"
if str(PLUGIN) not in sys.path:
    sys.path.insert(0, str(PLUGIN))
