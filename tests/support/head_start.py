"""A head start for the suite's slowest session resources: the task kit is trained, and the
engines that evaluate and serve it are started, in the background while other tests run.

Training takes about a minute on one core, and an engine start half a minute. In a run without
workers, the tests that need neither (most of the registry's) keep one core of two busy and leave
the other idle, so the suite runs the modules that need no kit first (tests/support/lanes.py), and
the session begins a `HeadStart` at its first test. In a run with workers (`pytest -n 2`), the
kit's lane begins it when its first test asks for the kit, and the engines start while the tests
that need only the kit run. A session fixture then `take`s what the head start made, waiting if it
is not ready yet, or starts it itself when no head start began it (a run of one test).

The kit trains in a process of its own, and the engines are started as their fixtures would start
them, by the starter each fixture registers. Without workers, both run at low priority while they
start, so the tests keep their core; an engine goes back to normal priority once it is ready.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from devkit.services import free_port
from devkit.task_kit import TaskKit, build_task_kit
from tests.support.names import KIT_BASE

KIT_FIXTURE = "task_kit"
BACKGROUND_NICENESS = 10  # beside the tests of a run without workers
# name of a session fixture -> how to start what it holds, given the session's service folder and
# the kit. Filled by @starter where each fixture is defined.
STARTERS: dict[str, Callable[[Path, TaskKit], object]] = {}


def starter(fixture_name: str):
    """Register how the session fixture `fixture_name` starts its resource, so a head start can
    start it early, e.g. @starter("eval_engine") def start_eval_engine(folder, kit) -> Service."""
    def register(start: Callable[[Path, TaskKit], object]):
        STARTERS[fixture_name] = start
        return start
    return register


def needs_kit(item: pytest.Item) -> bool:
    return KIT_FIXTURE in getattr(item, "fixturenames", ())


def build_kit(root: Path, log: Path) -> TaskKit:
    """The kit in root: loaded at once when built, else trained in a low-priority process."""
    if root.is_dir() and any(root.iterdir()):
        try:
            return build_task_kit(root, base_model_name=KIT_BASE)
        except FileExistsError:  # a kit from an older recipe: the cache is ours to replace
            shutil.rmtree(root)
    with log.open("wb") as output:
        trained = subprocess.run(
            [sys.executable, "-m", "devkit.task_kit", str(root), "--base-model-name", KIT_BASE],
            stdout=output, stderr=subprocess.STDOUT)
    if trained.returncode != 0:
        raise RuntimeError(f"training the task kit failed ({trained.returncode}):\n{log.read_text()[-4000:]}")
    return build_task_kit(root, base_model_name=KIT_BASE)


class HeadStart:
    """The kit and the registered resources, made in background threads in that order."""

    def __init__(self, kit_root: Path, folder: Path, wanted: set[str], *, begin_now: bool = True,
                 niceness: int = BACKGROUND_NICENESS) -> None:
        """Make the kit, then the starters' resources among `wanted` (the fixtures of the tests
        that need the kit): now, or when the kit is first asked for (`begin_now=False`). Nothing
        begins now when `wanted` needs no kit."""
        self.kit_root, self.folder, self.wanted = kit_root, folder, wanted
        self._threads = ThreadPoolExecutor(max_workers=1 + len(STARTERS), thread_name_prefix="head-start",
                                           initializer=_set_this_threads_priority, initargs=(niceness,))
        self._kit: Future | None = None
        self._started: dict[str, Future] = {}
        if begin_now and KIT_FIXTURE in wanted:
            self._begin()

    def _begin(self) -> None:
        _first_connection_here()
        self._kit = self._threads.submit(build_kit, self.kit_root, self.folder / "task-kit.log")
        self._started = {name: self._threads.submit(_start_in_background, start, self.folder, self.kit)
                         for name, start in STARTERS.items() if name in self.wanted}

    def kit(self) -> TaskKit:
        if self._kit is None:
            self._begin()
        return self._kit.result()

    def take(self, fixture_name: str):
        """What the head start made for this fixture (waiting for it), or a fresh one when it was
        not wanted at the start. The caller owns it from now on."""
        started = self._started.pop(fixture_name, None)
        if started is None:
            return STARTERS[fixture_name](self.folder, self.kit())
        return started.result()

    def close(self) -> None:
        """Stop what no fixture took (a run cut short): what has not begun never will, and what
        is starting is stopped once it has started."""
        self._threads.shutdown(wait=True, cancel_futures=True)
        for started in self._started.values():
            if not started.cancelled() and started.exception() is None:
                _stop(started.result())
        self._started.clear()


def _first_connection_here() -> None:
    """pytest walks logging's table of loggers at every test phase, without a lock, and httpcore
    adds its loggers to that table on its first connection. Made from a background thread (an
    engine's readiness poll), that first connection once failed a test with "dictionary changed
    size during iteration"; made here, in the tests' thread, it adds them before any thread
    starts."""
    try:
        httpx.get(f"http://127.0.0.1:{free_port()}/", timeout=1)  # nothing listens: refused at once
    except httpx.HTTPError:
        pass


def _set_this_threads_priority(niceness: int) -> None:
    # Linux keeps a niceness per thread, and a process inherits the one of the thread that
    # started it: everything a head-start thread starts runs at this priority.
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)


def _start_in_background(start: Callable[[Path, TaskKit], object], folder: Path, kit: Callable[[], TaskKit]):
    resource = start(folder, kit())
    for member in _members(resource):
        try:  # ready: back to normal priority, which only a privileged user may set
            os.setpriority(os.PRIO_PGRP, getattr(member, "service", member).process.pid, 0)
        except PermissionError:
            pass
    return resource


def _members(resource) -> list:
    """The services a starter made: one, or a dict of them (a Restartable holds its service)."""
    return list(resource.values()) if isinstance(resource, dict) else [resource]


def _stop(resource) -> None:
    for member in _members(resource):
        member.stop()
