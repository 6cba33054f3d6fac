"""`loraplane up` and `loraplane demo` from a clean checkout, end to end, on real vLLM on CPU.

The checkout holds the repository's files and no state; of what `up` builds, only the task kit is
there already (the suite's, trained once per run). It runs its own code (`python -m loraplane` from its folder). The virtual environments are this suite's:
installing them again would take minutes, and CI installs them from nothing on a fresh clone
before this test runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from devkit import engine, services

REPO = Path(__file__).resolve().parents[1]
UP_TIMEOUT_S = 600  # a cold start seeds the demo and starts two engines on two cores
READY_LINE = re.compile(r"loraplane is up in (\d+) s")


class Up:
    """`loraplane up` running in the checkout, with its output in a log."""

    def __init__(self, checkout: Path, port: int, router_port: int, log: Path) -> None:
        self.checkout, self.log = checkout, log
        self.registry_url, self.router_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{router_port}"
        self.offset = log.stat().st_size if log.exists() else 0
        self.process = subprocess.Popen(
            [sys.executable, "-m", "loraplane", "up", "--port", str(port), "--router-port", str(router_port)],
            cwd=checkout, env=_clean_env(), stdout=log.open("ab"), stderr=subprocess.STDOUT)
        self.children: list[psutil.Process] = []

    def output(self) -> str:
        return self.log.read_bytes()[self.offset:].decode(errors="replace")

    def wait_ready(self) -> int:
        deadline = time.monotonic() + UP_TIMEOUT_S
        while not (ready := READY_LINE.search(self.output())):
            assert self.process.poll() is None, f"loraplane up exited:\n{self.output()[-4000:]}"
            assert time.monotonic() < deadline, f"loraplane up not ready:\n{self.output()[-4000:]}"
            time.sleep(1)  # the poll interval: a start takes minutes
        self.children = psutil.Process(self.process.pid).children(recursive=True)
        return int(ready.group(1))

    def child(self, command: str) -> psutil.Process:
        """The running process of one stack member, e.g. 'router'."""
        for process in psutil.Process(self.process.pid).children():
            if process.cmdline()[2:4] == ["loraplane", command]:
                return process
        raise AssertionError(f"no running {command} under loraplane up")

    def interrupt(self, timeout_s: float = 90) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=timeout_s)

    def kill_everything(self) -> None:
        """After a failure: nothing may outlive the test."""
        for process in [*self.children, psutil.Process(self.process.pid)]:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass


def _clean_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORAPLANE_")}
    env["LORAPLANE_VLLM_PYTHON"] = str(engine.vllm_python())  # this suite's vLLM environment
    env["COLUMNS"] = "120"
    return env


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, task_kit) -> Path:
    """The repository's files, and the suite's task kit where `loraplane up` keeps its own: the kit
    is trained once per run (tests/loraplane/test_task_kit.py checks the build and its reuse), and
    `up` reuses a built kit as it would its own."""
    folder = tmp_path_factory.mktemp("checkout")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode)
    assert not (folder / ".loraplane").exists() and not (folder / ".cache").exists()
    shutil.copytree(task_kit.root, folder / ".loraplane" / "task-kit")
    return folder


@pytest.fixture(scope="module")
def ports() -> tuple[int, int]:
    return services.free_port(), services.free_port()


@pytest.fixture(scope="module")
def first_run(checkout: Path, ports) -> Iterator[Up]:
    up = Up(checkout, *ports, checkout / "up.log")
    try:
        up.wait_ready()
        yield up
    finally:
        if up.process.poll() is None:
            up.kill_everything()


def demo(checkout: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loraplane", "demo"], cwd=checkout, env=_clean_env(),
                          capture_output=True, text=True, timeout=900)


def complete(url: str, key: str, model: str, prompt: str) -> httpx.Response:
    return httpx.post(url + "/v1/completions", headers={"Authorization": f"Bearer {key}"}, timeout=60,
                      json={"model": model, "prompt": prompt, "max_tokens": 16, "temperature": 0})


def test_a_cold_up_builds_what_is_absent_and_seeds_the_demo(first_run: Up, checkout: Path):
    state = checkout / ".loraplane"
    assert (state / "task-kit" / "task_kit.json").is_file()
    assert not (state / "logs" / "task-kit.log").exists()  # the built kit was reused, not trained again
    assert "created the first admin token" in first_run.output()
    for secret in ("admin.token", "demo.json"):
        assert stat.S_IMODE((state / secret).stat().st_mode) == 0o600
    setup = json.loads((state / "demo.json").read_text())
    printed = first_run.output()
    for name in ("reviewer", "uploader", "app"):
        assert setup["tokens"][name] in printed  # printed whole, to be copied
    assert f"{first_run.router_url}/v1" in printed and f"{first_run.registry_url}/ui/" in printed
    assert httpx.get(first_run.registry_url + "/ui/sign-in").status_code == 200
    # Every member of the stack runs, and vLLM listens on loopback only.
    names = {" ".join(p.cmdline()[2:4]) for p in first_run.children if p.is_running()}
    assert {"loraplane serve", "loraplane worker", "loraplane agent", "loraplane router"} <= names
    vllms = [p for p in first_run.children if "vllm.entrypoints.openai.api_server" in p.cmdline()]
    assert len(vllms) == 2
    for process in vllms:
        cmdline = process.cmdline()
        assert cmdline[cmdline.index("--host") + 1] == "127.0.0.1"


def test_the_demo_tells_the_story_and_the_registry_agrees(first_run: Up, checkout: Path):
    result = demo(checkout)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads(result.stdout)
    assert summary["passed"] is True and summary["problems"] == []
    assert {name: e["state"] for name, e in summary["evaluations"].items()} == {
        "demo/digits@1": "passed", "demo/reverse@1": "passed", "demo/digits@2": "failed"}
    assert summary["evaluations"]["demo/digits@1"]["exact_by_task"] == {"digits": "12/12", "reverse": "0/12"}
    assert summary["served"] == {"demo/digits": {"served_name": "demo/digits@1", "correct": 3, "asked": 3},
                                 "demo/reverse": {"served_name": "demo/reverse@1", "correct": 3, "asked": 3}}
    blocked = summary["blocked"]["demo/digits@2"]
    assert (blocked["status"], blocked["code"], blocked["router_status"]) == (422, "gate_blocked", 404)
    assert "demo-tasks (failed: exact_match)" in blocked["message"]
    assert "demo passed" in result.stderr and "1. push three adapters" in result.stderr
    challenger = summary["delivery"]["challenger"]
    assert challenger == {"suite": "demo/digits-task", "challenger": "demo/digits@3",
                          "incumbent": "demo/digits@1", "challenger_exact_match": 1.0,
                          "incumbent_exact_match": 1.0, "same_batch": True}
    canary = summary["delivery"]["canary"]
    assert canary["state"] == "promoted" and canary["canary_requests"] >= 10
    assert canary["answered"].get("demo/digits@3", 0) >= 10 and canary["answered"].get("demo/digits@1", 0) >= 1

    # What the demo claims, checked on its own: the pool, the audit log, and the router.
    state = checkout / ".loraplane"
    setup = json.loads((state / "demo.json").read_text())
    admin = httpx.Client(base_url=first_run.registry_url, timeout=30,
                         headers={"Authorization": f"Bearer {(state / 'admin.token').read_text().strip()}"})
    aliases = admin.get("/v1/pools/demo/aliases").json()
    assert sorted((a["served_name"], a["alias"]) for a in aliases) == [
        ("demo/digits@3", "production"), ("demo/reverse@1", "production")]  # the canary's, now
    promoted = admin.get("/v1/audit", params={"action": "canary.promoted"}).json()["items"]
    assert [e["actor"] for e in promoted] == ["canary-analysis"]
    assert promoted[0]["after"]["evidence"]["status"]["verdict"] == "pass"
    approvals = admin.get("/v1/audit", params={"action": "promotion.approved"}).json()["items"]
    assert {event["actor"].split(" (")[0] for event in approvals} == {"reviewer"}
    answer = complete(first_run.router_url, setup["tokens"]["app"], "demo/reverse", "reverse: cat dog sun =>")
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["text"].strip() == "sun dog cat"
    assert answer.headers["x-loraplane-served-name"] == "demo/reverse@1"
    refused = complete(first_run.router_url, setup["tokens"]["app"], "demo/digits@2", "digits: 1 2 =>")
    assert refused.status_code == 404


def test_a_member_that_dies_is_started_again(first_run: Up, checkout: Path):
    setup = json.loads((checkout / ".loraplane" / "demo.json").read_text())
    router = first_run.child("router")
    router.kill()
    router.wait(timeout=10)

    def answers() -> bool:
        response = complete(first_run.router_url, setup["tokens"]["app"], "demo/digits", "digits: 4 2 =>")
        return response.status_code == 200 and response.json()["choices"][0]["text"].strip() == "four two"

    services.wait_until(answers, timeout_s=60, what="the restarted router")
    assert first_run.child("router").pid != router.pid
    assert "router exited with code -9" in first_run.output()


def test_ctrl_c_stops_everything_and_a_second_up_reuses_it(first_run: Up, checkout: Path, ports):
    state = checkout / ".loraplane"
    admin_token, setup = (state / "admin.token").read_text(), (state / "demo.json").read_text()
    children = psutil.Process(first_run.process.pid).children(recursive=True)
    assert first_run.interrupt() == 0
    assert "stopped; the state stays in" in first_run.output()
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert alive == [], [p.cmdline()[:4] for p in alive]

    second = Up(checkout, *ports, checkout / "up.log")
    try:
        second.wait_ready()
        output = second.output()
        assert "created the first admin token" not in output
        assert re.search(r"✓ the tiny base model and task adapters \(0\.\d s\)", output), output
        assert (state / "admin.token").read_text() == admin_token
        assert (state / "demo.json").read_text() == setup  # the same tokens, still valid
        # The node agent restores the promoted adapters without waiting on anyone.
        app_key = json.loads(setup)["tokens"]["app"]
        answer = complete(second.router_url, app_key, "demo/digits", "digits: 7 0 =>")
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["text"].strip() == "seven zero"
        assert second.interrupt() == 0
    finally:
        if second.process.poll() is None:
            second.kill_everything()
