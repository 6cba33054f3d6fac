"""Which database an operator's command (`loraplane token ...`) writes to, said out loud.

Those commands talk to the database directly. Without LORAPLANE_DATA_DIR or
LORAPLANE_DATABASE_URL they would use ~/.loraplane/loraplane.db, while `loraplane up` keeps its
state in ./.loraplane: a token made there would land, silently, in a database no registry reads.
So a missing or never-migrated embedded database is refused (and not created), a ./.loraplane
this command would not use is refused naming the setting, and every write says where it went.
A secret that is not the registry's is refused too: a token hashed under it would never work."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from registry.errors import Unprocessable
from registry.settings import RegistrySettings, get_settings

UP_DATA_DIR = Path(".loraplane")  # `loraplane up`'s default


def checked() -> str:
    """The database the command will use, shown without its password; refuses the ones above,
    and a secret that is not the registry's (token hashes and audit events are keyed with it)."""
    from registry.db import plain_transaction
    from registry.deployment_keys import service as deployment_keys

    settings = get_settings()
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite":
        _check_embedded(settings, Path(url.database or ""))
    with plain_transaction() as session:
        deployment_keys.require_the_registrys(session, "token command", signs=False)
    return url.render_as_string(hide_password=True)


def _check_embedded(settings: RegistrySettings, database: Path) -> None:
    local = UP_DATA_DIR / "loraplane.db"
    if local.is_file() and local.resolve() != database.resolve():
        raise Unprocessable(
            f"this command would use the database at {database}, but {UP_DATA_DIR.resolve()} (where "
            "`loraplane up` keeps its state) holds one too", code="which_database",
            hint=f"Say which: LORAPLANE_DATA_DIR={UP_DATA_DIR} for `loraplane up`'s, or the data "
                 "folder (or LORAPLANE_DATABASE_URL) of the registry you mean.")
    if not database.is_file() or not _migrated(database):
        raise Unprocessable(
            f"there is no loraplane database at {database}", code="no_database",
            hint="Set LORAPLANE_DATA_DIR to the registry's data folder (`loraplane up` uses "
                 "./.loraplane) or LORAPLANE_DATABASE_URL to its database; or create one here with "
                 "`loraplane db upgrade`.")


def _migrated(database: Path) -> bool:
    # Opened read-only, so that checking never creates or changes the file.
    engine = create_engine(f"sqlite:///file:{database}?mode=ro&uri=true")
    try:
        return inspect(engine).has_table("alembic_version")
    except SQLAlchemyError:
        return False
    finally:
        engine.dispose()
