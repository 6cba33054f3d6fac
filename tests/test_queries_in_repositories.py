"""Every SQLAlchemy statement lives in its aggregate's repository.py (README, "Layout").

Services, rules, reading modules, endpoints, web pages and workers call small named repository
functions; they may still use session.get, session.add, session.flush and session.delete. This
test reads the source (no import, no database), so it runs in a fraction of a second and names the
file and line of every statement built or run outside a repository.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("registry", "web", "workers", "loraplane")

# What builds a statement or an SQL expression. Types (Session, Select, Engine), exceptions and
# the schema's column types are not statements and may be imported anywhere.
STATEMENT_NAMES = frozenset({
    "select", "insert", "update", "delete", "func", "text", "exists", "and_", "or_", "not_",
    "union", "union_all", "intersect", "except_", "case", "cast", "literal", "literal_column",
    "column", "table", "bindparam", "tuple_", "null", "true", "false", "asc", "desc", "distinct",
    "nulls_first", "nulls_last", "over", "within_group", "lateral", "values", "aliased",
})
# Calls that run a statement, whatever the receiver is called (session, connection, db...).
RUNNING_CALLS = frozenset({"execute", "scalar", "scalars"})

# Modules that are the data layer itself, not callers of it.
DATA_LAYER = {
    "registry/db.py": "engine and connection setup (SQLite pragmas on connect)",
    "registry/tables.py": "the schema: server defaults are SQL expressions",
    "registry/pagination.py": "the keyset page that repositories run their listing queries through",
}


def is_repository(relative: str) -> bool:
    return Path(relative).name == "repository.py" or relative in DATA_LAYER


def statements_outside_repositories(relative: str, source: str) -> list[str]:
    """`file:line what` for each statement imported, built or run in a module that is not a
    repository."""
    tree = ast.parse(source, filename=relative)
    found = []
    module_aliases = set()  # names bound to sqlalchemy (sub)modules: `import sqlalchemy as sa`
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
            for alias in node.names:
                if alias.name in STATEMENT_NAMES:
                    found.append(
                        f"{relative}:{node.lineno} imports {alias.name} from {node.module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sqlalchemy":
                    module_aliases.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in STATEMENT_NAMES
                and isinstance(node.value, ast.Name) and node.value.id in module_aliases):
            found.append(f"{relative}:{node.lineno} uses {node.value.id}.{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in RUNNING_CALLS):
            found.append(f"{relative}:{node.lineno} calls .{node.func.attr}()")
    return sorted(found, key=lambda line: int(line.split(":")[1].split()[0]))


def test_statements_live_in_repositories():
    # A listed module that was renamed or removed would leave a stale exception behind.
    assert all((REPO / path).is_file() for path in DATA_LAYER), "DATA_LAYER names a missing file"
    found = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if not is_repository(relative):
                found += statements_outside_repositories(relative, path.read_text())
    if found:
        pytest.fail("statements outside a repository.py (move each into its aggregate's "
                    "repository.py, in a function named for what it fetches or changes):\n"
                    + "\n".join(found), pytrace=False)


def test_the_check_sees_every_form():
    """The scan catches each way a statement enters a module, so a pass above means something."""
    source = (
        "import sqlalchemy as sa\n"
        "from sqlalchemy import select, Select\n"
        "from sqlalchemy.dialects.postgresql import insert\n"
        "def load(session):\n"
        "    session.execute(sa.text('SELECT 1'))\n"
        "    return session.scalars(select(1)), session.get(object, 1)\n"
    )
    assert statements_outside_repositories("registry/pools/service.py", source) == [
        "registry/pools/service.py:2 imports select from sqlalchemy",
        "registry/pools/service.py:3 imports insert from sqlalchemy.dialects.postgresql",
        "registry/pools/service.py:5 calls .execute()",
        "registry/pools/service.py:5 uses sa.text",
        "registry/pools/service.py:6 calls .scalars()",
    ]
