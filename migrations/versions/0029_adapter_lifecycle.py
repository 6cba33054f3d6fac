"""adapter lifecycle: adapters and versions can be retired (kept for the record, never promoted
again) and deleted (their blobs no longer referenced); blobs nothing references are collected
after a grace period, which blob_gc_marks times from when each was first seen unreferenced

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-07 09:00:00
"""

import sqlalchemy as sa
from alembic import op


revision = '0029'
down_revision = '0028'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('adapters') as batch:
        batch.add_column(sa.Column('state', sa.String(length=16), nullable=False, server_default='active'))
        batch.add_column(sa.Column('retired_at', sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True))
        batch.create_index('ix_adapters_state', ['state'])
    with op.batch_alter_table('adapter_versions') as batch:
        batch.add_column(sa.Column('retired_at', sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        'blob_gc_marks',
        sa.Column('sha256', sa.String(length=64), primary_key=True),
        sa.Column('unreferenced_since', sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('blob_gc_marks')
    with op.batch_alter_table('adapter_versions') as batch:
        batch.drop_column('deleted_at')
        batch.drop_column('retired_at')
    with op.batch_alter_table('adapters') as batch:
        batch.drop_index('ix_adapters_state')
        batch.drop_column('deleted_at')
        batch.drop_column('retired_at')
        batch.drop_column('state')
