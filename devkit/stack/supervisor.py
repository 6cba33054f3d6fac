"""Run the local stack's processes: each in a session of its own with its own log, waited on
until ready, started again when it dies, and all stopped together, last started first."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console

console = Console(stderr=True)
_PR_SET_PDEATHSIG = 1


class StartFailed(RuntimeError):
    def __init__(self, name: str, why: str, log: Path) -> None:
        tail = log.read_text(errors="replace")[-2500:] if log.exists() else ""
        super().__init__(f"{name} {why}; the end of {log}:\n{tail}")
        self.name = name


@dataclass
class ProcessSpec:
    name: str
    argv: list[str]
    env: dict[str, str]
    ready: Callable[[], bool]  # polled until it returns True
    ready_timeout_s: float = 90
    cwd: Path | None = None


@dataclass
class _Running:
    spec: ProcessSpec
    process: subprocess.Popen
    log_offset: int
    started_at: float = field(default_factory=time.monotonic)
    quick_deaths: int = 0
    restart_at: float | None = None


def http_ok(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False
    return check


def _die_with_parent() -> None:
    """In the child: SIGTERM when `loraplane up` itself dies, even by SIGKILL, so nothing is left
    holding ports. Linux only; elsewhere the orderly stop still applies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class Supervisor:
    """Start, watch and stop the stack's processes. Logs go to `log_dir/<name>.log`."""

    def __init__(self, log_dir: Path, *, stop_timeout_s: float = 30, backoff_max_s: float = 30,
                 healthy_after_s: float = 60) -> None:
        self.log_dir = log_dir
        self.stop_timeout_s, self.backoff_max_s, self.healthy_after_s = stop_timeout_s, backoff_max_s, healthy_after_s
        self.running: dict[str, _Running] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def start(self, spec: ProcessSpec) -> None:
        log = self.log_path(spec.name)
        with log.open("ab") as out:
            offset = out.tell()
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {spec.name}\n".encode())
            out.flush()
            process = subprocess.Popen(spec.argv, env=spec.env, cwd=spec.cwd, stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True, preexec_fn=_die_with_parent)
        previous = self.running.get(spec.name)
        self.running[spec.name] = _Running(spec, process, offset,
                                           quick_deaths=previous.quick_deaths if previous else 0)

    def log_since_start(self, name: str) -> bytes:
        with self.log_path(name).open("rb") as log:
            log.seek(self.running[name].log_offset)
            return log.read()

    def wait_ready(self, *names: str) -> None:
        """Until each named process is ready; StartFailed if one exits or takes too long."""
        for name in names:
            entry = self.running[name]
            deadline = time.monotonic() + entry.spec.ready_timeout_s
            while not entry.spec.ready():
                if entry.process.poll() is not None:
                    raise StartFailed(name, f"exited with code {entry.process.returncode} while starting",
                                      self.log_path(name))
                if time.monotonic() > deadline:
                    raise StartFailed(name, f"was not ready after {entry.spec.ready_timeout_s:.0f} s",
                                      self.log_path(name))
                time.sleep(0.2)

    def check(self) -> None:
        """Start again, after a pause that grows while deaths come quickly, whatever has died."""
        now = time.monotonic()
        for name, entry in list(self.running.items()):
            if entry.restart_at is not None:
                if now >= entry.restart_at:
                    console.print(f"[yellow]starting {name} again[/yellow]")
                    self.start(entry.spec)
                continue
            code = entry.process.poll()
            if code is None:
                continue
            lived = now - entry.started_at
            entry.quick_deaths = 0 if lived >= self.healthy_after_s else entry.quick_deaths + 1
            pause = min(self.backoff_max_s, 2.0 ** entry.quick_deaths)
            entry.restart_at = now + pause
            console.print(f"[red]{name} exited with code {code}[/red] after {lived:.0f} s; starting it "
                          f"again in {pause:.0f} s (see {self.log_path(name)})")

    def stop_all(self) -> None:
        """SIGTERM to each process group, newest first; SIGKILL for any still there after the
        timeout. vLLM's engine and a worker's children are in those groups too."""
        for name in reversed(list(self.running)):
            entry = self.running.pop(name)
            _stop_group(entry.process, self.stop_timeout_s)


def _stop_group(process: subprocess.Popen, timeout_s: float) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass
    # A group member that outlived its leader (vLLM's engine core) goes too.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
