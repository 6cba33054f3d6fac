"""Write a benchmark's result file: {"benchmark", "metrics", "params", "env"} under results/."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def write(benchmark: str, metrics: dict, params: dict) -> Path:
    result = {"benchmark": benchmark, "metrics": metrics, "params": params,
              "env": {"python": platform.python_version(), "machine": platform.machine(),
                      "cpus": os.cpu_count(), "platform": platform.platform()}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{benchmark}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(metrics, indent=2))
    return path
