"""Alembic environment: the URL comes from the caller's config, the target from registry.tables."""

from alembic import context
from registry.db import make_engine
from registry.tables import Base

config = context.config
url = config.get_main_option("sqlalchemy.url")


def run_migrations_online() -> None:
    # No server-side prepared statements, so a migration runs through PgBouncer's transaction
    # pooling too (LORAPLANE_DATABASE_PGBOUNCER); one migration run prepares nothing worth keeping.
    engine = make_engine(url, pooled=False, pgbouncer=True)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
