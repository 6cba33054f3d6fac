"""A transaction's commit runs in one visible place: `UnitOfWork.commit` (registry/unit_of_work.py).
A rollback goes through the unit too, which forgets what it recorded.

No code hooks itself into SQLAlchemy's session events, where the work at commit would run in an
order nobody wrote down, and nothing but a unit of work commits. Engine events (SQLite's pragmas
and write lock) stay in registry/db.py. This test reads the source (no import, no database).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("registry", "web", "workers", "serving", "loraplane", "devkit", "signed_digests",
           "loraplane_client", "migrations")
ENGINE_EVENTS = "registry/db.py"
# The unit of work commits and rolls back; the other two only call a unit's (work_scope.Work).
COMMITTERS = {"registry/unit_of_work.py", "registry/work_scope.py", "registry/request_session.py"}


def _modules() -> list[tuple[str, ast.Module]]:
    found = []
    for package in PRODUCT:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            found.append((relative, ast.parse(path.read_text(), filename=relative)))
    return found


def event_hooks(relative: str, tree: ast.Module) -> list[str]:
    """`file:line target` of each `event.listen(target, ...)` or `@event.listens_for(target, ...)`."""
    return [f"{relative}:{node.lineno} {ast.unparse(node.args[0]) if node.args else '?'}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("listen", "listens_for")
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "event"]


def commits(relative: str, tree: ast.Module) -> list[str]:
    """`file:line` of each `.commit()` or `.rollback()`: a rollback that skips the unit of work
    would leave its record of the undone work to be sealed by the next commit."""
    return [f"{relative}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("commit", "rollback") and not node.args]


def test_no_session_event_listeners_and_engine_events_only_in_db():
    hooks = [hook for relative, tree in _modules() for hook in event_hooks(relative, tree)]
    assert hooks, "the scan finds db.py's engine events: it would find a session listener too"
    stray = [hook for hook in hooks
             if not (hook.startswith(f"{ENGINE_EVENTS}:") and hook.endswith(" engine"))]
    assert stray == [], ("SQLAlchemy event hooks other than db.py's on the engine; work at commit "
                         f"belongs in UnitOfWork.commit (registry/unit_of_work.py): {stray}")


def test_only_the_unit_of_work_commits():
    found = [c for relative, tree in _modules() for c in commits(relative, tree)]
    stray = [c for c in found if c.split(":")[0] not in COMMITTERS]
    assert any(c.startswith("registry/unit_of_work.py:") for c in found)
    assert stray == [], f"commits outside the unit of work (use unit_of_work.transaction()): {stray}"


@pytest.mark.parametrize("source, expected", [
    ("from sqlalchemy import event\n@event.listens_for(Session, 'before_commit')\ndef f(s): pass\n", 1),
    ("event.listen(Session, 'after_commit', f)\n", 1),
    ("session.commit()\n", 0),
    ("session.rollback()\n", 0),
])
def test_the_scan_sees_what_it_forbids(source, expected):
    assert len(event_hooks("x.py", ast.parse(source))) == expected
    assert len(commits("x.py", ast.parse(source))) == (1 - expected)
