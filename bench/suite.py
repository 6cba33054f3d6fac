"""The whole suite from a fresh clone, as CI runs it: `CI=true ./dev test` in a new clone of this
checkout's HEAD, which installs its own virtual environments first.

Metrics: `pytest_seconds` (pytest's own figure), `tests` (how many passed) and `vllm_starts`
(every vLLM server the run started, the suite's and `loraplane up`'s alike: the vLLM interpreter
is a wrapper that counts its server starts), and `kit_lane_seconds` and `other_lanes_seconds`:
the summed test times of the task kit's lane and of every other lane (tests/support/lanes.py), so
a run over budget shows which worker held it. The wall time with installs and the 20 slowest tests
are kept beside them. Then, in the same clone, `./dev test --fast`: `fast_tier_seconds` is its
wall time, from the command to its end (what a developer waits), and `fast_tier_tests` how many
passed.

    python -m bench.suite [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import report

REPO = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"=+ (?P<counts>.*?) in (?P<seconds>[\d.]+)s")
SLOW_LINE = re.compile(r"^(?P<seconds>[\d.]+)s (?P<phase>setup|call|teardown)\s+(?P<test>\S+)$")


def counting_wrapper(folder: Path, vllm_python: Path, count_file: Path) -> Path:
    """An interpreter that notes each vLLM server start, then runs the real one."""
    wrapper = folder / "vllm-python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *vllm.entrypoints.openai.api_server*) echo start >> "{count_file}";; esac\n'
        f'exec "{vllm_python}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def lane_seconds(slowest: list[dict]) -> dict[str, float]:
    """Summed test times of the kit's lane and of the rest, from pytest-xdist's `test@lane` ids."""
    kit = sum(float(line["seconds"]) for line in slowest if line["test"].endswith("@kit"))
    rest = sum(float(line["seconds"]) for line in slowest) - kit
    return {"kit_lane_seconds": round(kit, 1), "other_lanes_seconds": round(rest, 1)}


def parse(output: str) -> tuple[float, int, list[dict]]:
    summary = SUMMARY.findall(output)
    if not summary:
        raise SystemExit("no pytest summary line in the output")
    counts, seconds = summary[-1]
    passed = int(re.search(r"(\d+) passed", counts).group(1))
    if re.search(r"\d+ (failed|error)", counts):
        raise SystemExit(f"the suite did not pass: {counts}")
    slowest = [match.groupdict() for line in output.splitlines()
               if (match := SLOW_LINE.match(line.strip()))]
    return float(seconds), passed, slowest


def fast_tier(clone: Path, env: dict[str, str]) -> tuple[float, int]:
    """(wall seconds, tests passed) of `./dev test --fast`, its environment installed already."""
    started = time.monotonic()
    result = subprocess.run(["./dev", "test", "--fast"], cwd=clone, env=env, capture_output=True, text=True)
    seconds = round(time.monotonic() - started, 1)
    if result.returncode != 0:
        print(result.stdout[-6000:] + result.stderr[-2000:], file=sys.stderr)
        raise SystemExit(f"the fast tier failed (exit {result.returncode})")
    return seconds, parse(result.stdout)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the clone and its log")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="loraplane-suite-"))
    clone, count_file, log = work / "checkout", work / "vllm-starts", work / "suite.log"
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.strip()
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    count_file.touch()
    env = {**os.environ, "CI": "true",
           "PYTEST_ADDOPTS": "--durations=0",  # every test's time, for the lanes' sums
           # vLLM's shared cache (what it learned of each model class) starts empty, as on a new machine.
           "VLLM_CACHE_ROOT": str(work / "vllm-cache"),
           "LORAPLANE_VLLM_PYTHON": str(counting_wrapper(work, clone / ".venv-vllm" / "bin" / "python", count_file))}
    started = time.monotonic()
    with log.open("w") as out:
        result = subprocess.run(["./dev", "test"], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall_s = time.monotonic() - started
    output = log.read_text(errors="replace")
    if result.returncode != 0:
        print(output[-6000:], file=sys.stderr)
        raise SystemExit(f"the suite failed (exit {result.returncode}); the log is {log}")
    pytest_s, passed, slowest = parse(output)
    fast_s, fast_passed = fast_tier(clone, env)
    metrics = {"pytest_seconds": pytest_s, "tests": passed,
               "vllm_starts": len(count_file.read_text().split()),
               "wall_seconds_with_installs": round(wall_s, 1),
               **lane_seconds(slowest), "fast_tier_seconds": fast_s, "fast_tier_tests": fast_passed}
    report.write("suite", metrics, {"commit": commit, "command": "CI=true ./dev test (fresh clone)",
                                    "slowest": slowest[:20]})
    if args.keep:
        print(f"clone and log kept in {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
