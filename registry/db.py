"""The engine and its sessions. Each entrypoint runs in one unit of work
(registry/unit_of_work.py): a request in its request session (registry/request_session.py),
anything else in a `unit_of_work.transaction()`; reads outside them in a `plain_transaction()`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from registry.errors import Unavailable
from registry.settings import get_settings


def make_engine(url: str, *, pooled: bool = True, pool_size: int = 10, max_overflow: int = 20,
                pgbouncer: bool = False, application_name: str | None = None) -> Engine:
    """`pgbouncer`: the URL goes through PgBouncer in transaction-pooling mode, where consecutive
    transactions may run on different server connections: psycopg must not prepare statements
    on the server (one prepared on one connection is missing on the next)."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"timeout": 30, "check_same_thread": False}, poolclass=NullPool
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin_immediate)
        return engine
    connect_args: dict[str, object] = {"prepare_threshold": None} if pgbouncer else {}
    if application_name is not None:
        connect_args["application_name"] = application_name
    if not pooled:
        return create_engine(url, poolclass=NullPool, connect_args=connect_args)
    return create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=max_overflow,
                         connect_args=connect_args)


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # Let SQLAlchemy emit BEGIN itself (below) instead of pysqlite's deferred BEGIN.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def _sqlite_begin_immediate(connection) -> None:
    # A deferred transaction that reads, then writes, fails at once when another writer got
    # in between. Taking the write lock up front makes concurrent writers wait instead.
    connection.exec_driver_sql("BEGIN IMMEDIATE")


@lru_cache
def get_engine() -> Engine:
    settings = get_settings()
    prepare_sqlite_folder(settings.database_url)
    return make_engine(settings.database_url, pool_size=settings.database_pool_size,
                       max_overflow=settings.database_max_overflow,
                       pgbouncer=settings.database_pgbouncer)


def dedicated_engine(application_name: str) -> Engine:
    """One connection of its own, outside the process's pool and named in pg_stat_activity: a
    leadership connection (registry/leadership/) that holds its transaction open."""
    settings = get_settings()
    return make_engine(settings.database_url, pool_size=1, max_overflow=0,
                       pgbouncer=settings.database_pgbouncer, application_name=application_name)


class DataFolderUnavailable(Unavailable):
    code = "data_dir_unavailable"


def prepare_sqlite_folder(url: str) -> None:
    """Create the folder of a SQLite database file (the embedded default keeps it in data_dir):
    SQLite itself only says "unable to open database file"."""
    if not url.startswith("sqlite"):
        return
    database = make_url(url).database
    if database and database != ":memory:" and not database.startswith("file:"):
        prepare_folder(Path(database).expanduser().absolute().parent)


def prepare_folder(folder: Path) -> None:
    """Create a state folder private to this user, or say which one cannot be and what to do."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise DataFolderUnavailable(
            f"cannot create the data folder {folder}: {error.strerror or type(error).__name__}",
            hint=f"Create it (mkdir -p -m 700 {folder}) as the user that runs loraplane, or point "
                 f"LORAPLANE_DATA_DIR (or LORAPLANE_DATABASE_URL) at a folder that user may "
                 f"write.") from None


@lru_cache
def _session_factory() -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(), expire_on_commit=False)


def new_session() -> Session:
    """A bare session: a unit of work owns it and commits it (unit_of_work.py)."""
    return _session_factory()()


@contextmanager
def plain_transaction() -> Iterator[Session]:
    """A transaction that needs nothing at its commit: reads, and rows of no audit interest (a
    token's stored hash upgraded). A change that needs its commit's work (an audit event, a
    signature, an announcement) is refused in it (pending_work.NoUnitOfWork): those go through a
    unit of work (registry/unit_of_work.py)."""
    with new_session() as session, session.begin():
        yield session
