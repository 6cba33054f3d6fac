"""Run Alembic programmatically, so `loraplane db ...` works wherever the package is installed."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from registry.db import prepare_sqlite_folder

SCRIPT_LOCATION = Path(__file__).parent


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    prepare_sqlite_folder(database_url)  # a fresh embedded default: its folder is not there yet
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)


def check(database_url: str) -> None:
    """Raise if the tables in registry.tables differ from what the migrations build."""
    command.check(alembic_config(database_url))
